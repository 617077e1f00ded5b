/* qwen35.c: the Qwen3.5 dense text model (SPEC-qwen35.md) behind eng.h.
 *
 * Weights are mmapped and handed to the backend with wrap_host where it has
 * one (the CPU backend points into the file); a device backend gets them
 * copied (alloc + upload, with a progress line), and there the projections
 * that read the same input are fused into one matrix each (a GDN layer's
 * qkv | z | b | a, an MLP's gate | up, an attention layer's q | k | v),
 * so decode streams each input once and launches one GEMV instead of
 * four. With --load-format dummy no file
 * is read: fill_random writes seeded values of config.json's shapes. Every
 * buffer the forward uses is carved from one workspace allocated at load
 * for a chunk of `grid` tokens, so nothing is allocated in prefill or
 * decode; the backend's own scratch is sized once by reserve().
 *
 * State layout (eng_layout), in this order:
 *   sections: for each GDN layer i, "gdn.S" [Hv, dk, dv] fp32, then
 *             "gdn.conv" [Kc-1, conv_dim] fp32 (the last Kc-1 pre-conv
 *             inputs, oldest first);
 *   views:    for each attention layer i, "attn.K" then "attn.V",
 *             [window, Hkv, D] of the model dtype (bf16 for bf16 models:
 *             K after norm and RoPE and V are bf16 values already, so the
 *             rows are exact), token axis 0.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "config.h"
#include "eng.h"
#include "eng_int.h"
#include "moor.h"
#include "wload.h"

/* ===================================================================== */
/* weights                                                               */

typedef struct wt {
	const void *p; /* device pointer */
	int dt;
} wt;

typedef struct layer_w {
	int full;
	wt in_norm, post_norm, gate, up, down;
	wt gu; /* fused: [2I, H] gate rows then up rows (gate, up unset) */
	/* fused: [2 Hq D + 2 Hkv D, H] q | k | v (q, k and v point into it:
	 * prefill runs them apart, a decode step as one GEMV) */
	wt qkvw;
	/* GDN */
	wt qkv, z, b, a, conv, norm, out;
	wt proj; /* fused: [conv_dim + value_dim + 2 Hv, H] qkv | z | b | a */
	float *A_log, *dt_bias; /* device fp32 [Hv] */
	/* attention */
	wt q, k, v, o, q_norm, k_norm;
	int sec_S, sec_conv; /* section indices, GDN */
	size_t off_S, off_conv; /* their offsets in an anchor slot */
	int view_K, view_V;  /* view indices, attention */
} layer_w;

/* Decode graphs: one per length bucket (ops.h's graph_begin max_len). */
#define GRAPH_BUCKETS 24

struct eng_model {
	const kern_ops *ops;
	kern_ctx *ctx;
	kern_queue *q;	/* compute */
	kern_queue *cq; /* copy: anchor slots */
	kern_event *ev_chunk, *ev_copied;
	int copy_pending; /* a slot copy the next section write waits for */
	qwen35_config c;
	eng_ckpt *ck;
	/* copied weights' reader (wload.h) while loading: get() and get_cat()
	 * say where each tensor goes, eng_model_load runs it */
	eng_wload *wl;
	int act;  /* KERN_ACT_BF16 for bf16 models */
	int kvdt; /* view dtype */
	int fused; /* fused projections (a device backend) */
	int dummy; /* --load-format dummy */
	uint64_t seed;
	int progress;
	uint64_t weight_bytes;
	double load_s, t_log; /* load time; last progress line */
	int key_dim, value_dim, conv_dim;
	wt embed, final_norm, head;
	layer_w *L;
	eng_layout lay;
	/* device handles to release at free: allocated (free()) or wrapped
	 * (unwrap()) */
	struct held {
		void *p;
		int wrapped;
	} *held;
	int n_held, cap_held;

	/* workspace, [T] tokens (device), carved from ws:
	 *   h    [T, H]  the residual stream
	 *   xn   [T, H]  a normed copy of h, the next projections' input
	 *   t0   [T, w0] projections: GDN qkv | z | b | a, attention q+gate |
	 *                k | v, MLP gate | up
	 *   t1   [T, w1] conv + SiLU output; attention q and gate; SwiGLU
	 *   t2   [T, w2] GDN core output; attention output
	 *   t3   [T, w2] gated norm output
	 *   t4   [T, H]  a mixer's or the MLP's output, added into h
	 *   beta, g [T, Hv]
	 *   delta_ws     delta_ws_bytes(grid, Hv, dk, dv): a chunk at a time
	 *   ids  [T] i32
	 *   logits [LOGIT_ROWS, V] */
	int64_t T; /* rows of a forward: the span, a multiple of the grid */
	/* a forward's slots inside it (forward_layers), lines ascending */
	const eng_slot *in_slots;
	int n_in_slots;
	void *ws;
	size_t ws_bytes; /* the whole carve, bytes */
	float *h, *xn, *t0, *t1, *t2, *t3, *t4, *beta, *g;
	void *delta_ws;
	int32_t *ids;
	float *logits;
	/* [IDS_RING] host: the ids' uploads read from here, each from its own
	 * stretch (ids_at advances), so that no stretch is rewritten before
	 * the queue's next sync (ops.h: an upload's source stays unchanged
	 * until then); a full ring syncs the queue and starts over */
	int32_t *ids_host;
	int64_t ids_at;
	int32_t dev_id;	   /* the id sample() left in ids[0], or -1 */
	int logits_kept;   /* logits row 0 holds the last token's */

	/* decode graphs, valid for the sequence buffers graph_sig hashes */
	kern_graph *graph[GRAPH_BUCKETS];
	uint64_t graph_sig;
#ifdef ENG_PROBE
	int64_t probe_pos; /* position of the chunk's first token */
#endif
};

#define LOGIT_ROWS 8
/* ids_host's length: 8 chunks of ids (or 8 grids of decode steps) between
 * the syncs it forces. */
#define IDS_RING(m) ((size_t)(m)->T * 8)

/* Probe points: only in the test build of this file (-DENG_PROBE,
 * tests/engine/golden_probe), which compares each tensor where the model
 * rounds with transformers' and may overwrite it; the production build
 * compiles them away. x is [rows, cols] with row stride ld, its row t the
 * token at position m->probe_pos + t; layer -1 is outside the layers. */
#ifdef ENG_PROBE
void eng_probe(const char *name, int layer, float *x, int rows, int cols,
	       int ld, int64_t pos);
#define PROBE(m, name, layer, x, rows, cols, ld)                              \
	eng_probe(name, layer, x, rows, cols, ld, (m)->probe_pos)
#define PROBING(m) ((void)(m), 1) /* fused ops would skip probe points */
#else
#define PROBE(m, name, layer, x, rows, cols, ld) ((void)(layer))
#define PROBING(m) ((void)(m), 0)
#endif

static int keep(eng_model *m, void *p, int wrapped)
{
	if (m->n_held == m->cap_held) {
		int cap = m->cap_held ? 2 * m->cap_held : 64;
		struct held *n = realloc(m->held, (size_t)cap * sizeof *n);
		if (!n)
			return -ENOMEM;
		m->held = n;
		m->cap_held = cap;
	}
	m->held[m->n_held].p = p;
	m->held[m->n_held].wrapped = wrapped;
	m->n_held++;
	return 0;
}

static void release(eng_model *m, void *p, int wrapped)
{
	if (!wrapped)
		m->ops->free(m->ctx, p);
	else if (m->ops->unwrap)
		m->ops->unwrap(m->ctx, p);
}

static void load_progress(eng_model *m, uint64_t add)
{
	m->weight_bytes += add;
	if (!m->progress)
		return;
	double now = moor_now();
	if (now - m->t_log < 1.0)
		return;
	m->t_log = now;
	double el = now - m->load_s;
	moor_info("loading: %.2f GB of weights in %.1f s (%.2f GB/s)",
		  (double)m->weight_bytes / 1e9, el,
		  el > 0 ? (double)m->weight_bytes / 1e9 / el : 0.0);
}

/* Device copy of host bytes, through wrap_host where the backend has it.
 * An upload's source must outlive the queue's next sync: the checkpoint's
 * mapping does (it is open until the model is freed); a staging buffer the
 * caller reuses is synced first (to_device_sync). */
static int to_device(eng_model *m, const void *host, size_t n, void **out)
{
	int rc, wrapped = m->ops->wrap_host != NULL;
	if (wrapped) {
		rc = m->ops->wrap_host(m->ctx, host, n, out);
	} else {
		rc = m->ops->alloc(m->ctx, n, out);
		if (rc == 0 && (rc = m->ops->upload(m->q, *out, host, n)))
			m->ops->free(m->ctx, *out);
	}
	if (rc == 0 && (rc = keep(m, *out, wrapped)))
		release(m, *out, wrapped);
	if (rc == 0)
		load_progress(m, n);
	return rc;
}

/* A fresh device buffer of n bytes, kept for eng_model_free. */
static int dev_alloc(eng_model *m, size_t n, void **out)
{
	int rc = m->ops->alloc(m->ctx, n, out);
	if (rc == 0 && (rc = keep(m, *out, 0)))
		m->ops->free(m->ctx, *out);
	return rc;
}

/* Seeded dummy values for a tensor of `elems` elements: each tensor's
 * stream is the model seed mixed with its name. */
static uint64_t name_seed(uint64_t seed, const char *name)
{
	uint64_t h = 0xcbf29ce484222325ull ^ seed;
	for (const char *p = name; *p; p++) {
		h ^= (unsigned char)*p;
		h *= 0x100000001b3ull;
	}
	return h;
}

/* The range of a dummy tensor: a matrix [N, K] is uniform in
 * +-1/sqrt(K) (unit-variance outputs for unit-variance inputs, times
 * 1/sqrt(3)), a norm's weight small around its identity, the conv taps
 * +-0.5; A_log and dt_bias are set in get_f32. */
static void dummy_range(const char *name, int ndim, int64_t d1, float *lo,
			float *hi)
{
	if (ndim >= 2 && !strstr(name, "conv1d")) {
		float a = 1.0f / sqrtf((float)(d1 > 0 ? d1 : 1));
		*lo = -a;
		*hi = a;
	} else if (strstr(name, "conv1d")) {
		*lo = -0.5f;
		*hi = 0.5f;
	} else if (strstr(name, "linear_attn.norm")) {
		*lo = 0.9f; /* a plain weight (SPEC §4): around 1 */
		*hi = 1.1f;
	} else {
		*lo = -0.1f; /* (1 + w) norms: around 1 */
		*hi = 0.1f;
	}
}

static int dummy_tensor(eng_model *m, const char *name, int ndim, int64_t d0,
			int64_t d1, int64_t d2, wt *w)
{
	int64_t elems = d0 * (ndim > 1 ? d1 : 1) * (ndim > 2 ? d2 : 1);
	int dt = m->c.dtype;
	size_t n = (size_t)elems * kern_dtype_size(dt);
	void *p;
	int rc = dev_alloc(m, n, &p);
	if (rc)
		return rc;
	float lo, hi;
	dummy_range(name, ndim, d1, &lo, &hi);
	rc = m->ops->fill_random(m->q, p, dt, (size_t)elems,
				 name_seed(m->seed, name), lo, hi);
	if (rc)
		return rc;
	load_progress(m, n);
	w->p = p;
	w->dt = dt;
	return 0;
}

static const char *prefix_of(const eng_ckpt *ck)
{
	static const char *const pre[] = {"model.language_model.", "model."};
	char name[256];
	for (size_t i = 0; i < 2; i++) {
		snprintf(name, sizeof name, "%sembed_tokens.weight", pre[i]);
		if (eng_ckpt_find(ck, name))
			return pre[i];
	}
	return NULL;
}

typedef struct loadctx {
	eng_model *m;
	const char *pre;
	char *err;
} loadctx;

static int get(loadctx *lc, wt *w, const char *fmt, int layer, int ndim,
	       int64_t d0, int64_t d1, int64_t d2)
{
	char rel[192], name[256];
	snprintf(rel, sizeof rel, fmt, layer);
	snprintf(name, sizeof name, "%s%s", lc->pre, rel);
	if (lc->m->dummy) {
		int rc = dummy_tensor(lc->m, name, ndim, d0, d1, d2, w);
		if (rc)
			moor_errf(lc->err, "dummy tensor %s: %s", name,
				  moor_strerror(rc));
		return rc;
	}
	int64_t shape[3] = {d0, d1, d2};
	const eng_tensor *t;
	int rc = eng_ckpt_get(lc->m->ck, name, ndim, shape, &t, lc->err);
	if (rc)
		return rc;
	void *p;
	if (lc->m->wl) {
		/* read and uploaded by the reader after load_weights */
		rc = dev_alloc(lc->m, t->nbytes, &p);
		if (rc == 0)
			rc = eng_wload_add(lc->m->wl, p, t);
		if (rc == 0)
			lc->m->weight_bytes += t->nbytes;
	} else {
		rc = to_device(lc->m, t->data, t->nbytes, &p);
	}
	if (rc) {
		moor_errf(lc->err, "%s: tensor %s: cannot place on the backend: %s",
			  t->file, name, moor_strerror(rc));
		return rc;
	}
	w->p = p;
	w->dt = t->dtype;
	return 0;
}

/* A small per-head vector kept in fp32 whatever its stored dtype. */
static int get_f32(loadctx *lc, float **out, const char *fmt, int layer,
		   int64_t n)
{
	char rel[192], name[256];
	snprintf(rel, sizeof rel, fmt, layer);
	snprintf(name, sizeof name, "%s%s", lc->pre, rel);
	float tmp[4096];
	if (n > 4096) {
		moor_errf(lc->err, "tensor %s: %lld heads is too many", name,
			  (long long)n);
		return MOOR_ESHAPE;
	}
	int rc;
	if (lc->m->dummy) {
		/* A_log in [-2, 0] and dt_bias in [-1, 1]: decays
		 * exp(-e^A_log softplus(.)) well inside (0, 1) */
		int alog = strstr(name, "A_log") != NULL;
		uint64_t sd = name_seed(lc->m->seed, name);
		for (int64_t i = 0; i < n; i++)
			tmp[i] = kern_fill_value(sd, (uint64_t)i, alog ? -2 : -1,
						 alog ? 0 : 1);
	} else {
		const eng_tensor *t;
		rc = eng_ckpt_get(lc->m->ck, name, 1, &n, &t, lc->err);
		if (rc)
			return rc;
		const unsigned char *src = t->data;
		for (int64_t i = 0; i < n; i++) {
			uint16_t h;
			if (t->dtype == KERN_F32) {
				memcpy(&tmp[i], src + 4 * i, 4);
			} else {
				memcpy(&h, src + 2 * i, 2);
				tmp[i] = t->dtype == KERN_BF16
					     ? moor_bf16_to_f32(h)
					     : moor_f16_to_f32(h);
			}
		}
	}
	void *p;
	rc = dev_alloc(lc->m, (size_t)n * 4, &p);
	/* tmp is on the stack: synced before it goes */
	if (rc == 0 &&
	    (rc = lc->m->ops->upload(lc->m->q, p, tmp, (size_t)n * 4)) == 0)
		rc = lc->m->ops->sync(lc->m->q);
	if (rc) {
		moor_errf(lc->err, "tensor %s: %s", name, moor_strerror(rc));
		return rc;
	}
	*out = p;
	return 0;
}

/* A fused matrix: the rows of n tensors [rows_i, K] of one dtype, stacked
 * in order, as one device matrix [sum rows_i, K]. */
static int get_cat(loadctx *lc, wt *w, const char *const *fmts, int layer,
		   const int64_t *rows, int n, int64_t K)
{
	eng_model *m = lc->m;
	char rel[192], name[256];
	int64_t total = 0;
	for (int i = 0; i < n; i++)
		total += rows[i];
	if (m->dummy) {
		snprintf(rel, sizeof rel, fmts[0], layer);
		snprintf(name, sizeof name, "%s%s.fused", lc->pre, rel);
		int rc = dummy_tensor(m, name, 2, total, K, 0, w);
		if (rc)
			moor_errf(lc->err, "dummy tensor %s: %s", name,
				  moor_strerror(rc));
		return rc;
	}
	const eng_tensor *t[8];
	MOOR_ASSERT(n <= 8);
	for (int i = 0; i < n; i++) {
		snprintf(rel, sizeof rel, fmts[i], layer);
		snprintf(name, sizeof name, "%s%s", lc->pre, rel);
		int64_t shape[2] = {rows[i], K};
		int rc = eng_ckpt_get(m->ck, name, 2, shape, &t[i], lc->err);
		if (rc)
			return rc;
		if (t[i]->dtype != t[0]->dtype) {
			moor_errf(lc->err,
				  "%s: tensor %s: dtype %s, %s is %s (a fused "
				  "projection needs one dtype)",
				  t[i]->file, name, t[i]->dtype_name,
				  t[0]->name, t[0]->dtype_name);
			return MOOR_EDTYPE;
		}
	}
	size_t es = kern_dtype_size(t[0]->dtype);
	size_t bytes = (size_t)total * (size_t)K * es;
	void *p;
	int rc = dev_alloc(m, bytes, &p);
	size_t off = 0;
	for (int i = 0; i < n && rc == 0; i++) {
		rc = m->wl ? eng_wload_add(m->wl, kern_at(p, off), t[i])
			   : m->ops->upload(m->q, kern_at(p, off), t[i]->data,
					    t[i]->nbytes);
		off += t[i]->nbytes;
	}
	if (rc) {
		moor_errf(lc->err, "fused %s: %s", name, moor_strerror(rc));
		return rc;
	}
	if (m->wl)
		m->weight_bytes += bytes;
	else
		load_progress(m, bytes);
	w->p = p;
	w->dt = t[0]->dtype;
	return 0;
}

static int load_weights(eng_model *m, char *err)
{
	const qwen35_config *c = &m->c;
	loadctx lc = {m, m->dummy ? "model." : prefix_of(m->ck), err};
	if (!lc.pre) {
		moor_errf(err, "checkpoint: no embed_tokens.weight under "
			       "model. or model.language_model.");
		return MOOR_EMISSING;
	}
	int H = c->hidden, I = c->inter, V = c->vocab, rc;
	if ((rc = get(&lc, &m->embed, "embed_tokens.weight", 0, 2, V, H, 0)) ||
	    (rc = get(&lc, &m->final_norm, "norm.weight", 0, 1, H, 0, 0)))
		return rc;
	if (c->tie) {
		m->head = m->embed;
	} else {
		/* lm_head sits at the root, outside the prefix. */
		loadctx root = {m, "", err};
		if ((rc = get(&root, &m->head, "lm_head.weight", 0, 2, V, H, 0)))
			return rc;
	}
	int Hv = c->lin_v_heads, dv = c->lin_v_dim, Kc = c->conv_kernel;
	int Hq = c->n_heads, Hkv = c->n_kv_heads, D = c->head_dim;
	for (int i = 0; i < c->layers; i++) {
		layer_w *l = &m->L[i];
		l->full = c->is_full[i];
		if ((rc = get(&lc, &l->in_norm, "layers.%d.input_layernorm.weight",
			      i, 1, H, 0, 0)) ||
		    (rc = get(&lc, &l->post_norm,
			      "layers.%d.post_attention_layernorm.weight", i, 1,
			      H, 0, 0)) ||
		    (rc = get(&lc, &l->down, "layers.%d.mlp.down_proj.weight", i,
			      2, H, I, 0)))
			return rc;
		if (m->fused) {
			static const char *const gu[] = {
			    "layers.%d.mlp.gate_proj.weight",
			    "layers.%d.mlp.up_proj.weight"};
			int64_t r[2] = {I, I};
			if ((rc = get_cat(&lc, &l->gu, gu, i, r, 2, H)))
				return rc;
		} else if ((rc = get(&lc, &l->gate,
				     "layers.%d.mlp.gate_proj.weight", i, 2, I,
				     H, 0)) ||
			   (rc = get(&lc, &l->up, "layers.%d.mlp.up_proj.weight",
				     i, 2, I, H, 0))) {
			return rc;
		}
		if (l->full && m->fused) {
			static const char *const qkv[] = {
			    "layers.%d.self_attn.q_proj.weight",
			    "layers.%d.self_attn.k_proj.weight",
			    "layers.%d.self_attn.v_proj.weight"};
			int64_t r[3] = {(int64_t)Hq * D * 2, (int64_t)Hkv * D,
					(int64_t)Hkv * D};
			if ((rc = get_cat(&lc, &l->qkvw, qkv, i, r, 3, H)))
				return rc;
			size_t es = kern_dtype_size(l->qkvw.dt);
			l->q = l->k = l->v = l->qkvw;
			l->k.p = (const char *)l->qkvw.p + (size_t)r[0] * H * es;
			l->v.p = (const char *)l->k.p + (size_t)r[1] * H * es;
		}
		if (l->full) {
			if ((!m->fused &&
			     ((rc = get(&lc, &l->q,
					"layers.%d.self_attn.q_proj.weight", i, 2,
					(int64_t)Hq * D * 2, H, 0)) ||
			      (rc = get(&lc, &l->k,
					"layers.%d.self_attn.k_proj.weight", i, 2,
					(int64_t)Hkv * D, H, 0)) ||
			      (rc = get(&lc, &l->v,
					"layers.%d.self_attn.v_proj.weight", i, 2,
					(int64_t)Hkv * D, H, 0)))) ||
			    (rc = get(&lc, &l->o, "layers.%d.self_attn.o_proj.weight",
				      i, 2, H, (int64_t)Hq * D, 0)) ||
			    (rc = get(&lc, &l->q_norm,
				      "layers.%d.self_attn.q_norm.weight", i, 1, D,
				      0, 0)) ||
			    (rc = get(&lc, &l->k_norm,
				      "layers.%d.self_attn.k_norm.weight", i, 1, D,
				      0, 0)))
				return rc;
		} else {
			static const char *const pj[] = {
			    "layers.%d.linear_attn.in_proj_qkv.weight",
			    "layers.%d.linear_attn.in_proj_z.weight",
			    "layers.%d.linear_attn.in_proj_b.weight",
			    "layers.%d.linear_attn.in_proj_a.weight"};
			int64_t r[4] = {m->conv_dim, m->value_dim, Hv, Hv};
			if (m->fused) {
				if ((rc = get_cat(&lc, &l->proj, pj, i, r, 4, H)))
					return rc;
			} else {
				wt *dst[4] = {&l->qkv, &l->z, &l->b, &l->a};
				for (int k = 0; k < 4; k++)
					if ((rc = get(&lc, dst[k], pj[k], i, 2,
						      r[k], H, 0)))
						return rc;
			}
			if ((rc = get(&lc, &l->conv,
				      "layers.%d.linear_attn.conv1d.weight", i, 3,
				      m->conv_dim, 1, Kc)) ||
			    (rc = get(&lc, &l->norm,
				      "layers.%d.linear_attn.norm.weight", i, 1, dv,
				      0, 0)) ||
			    (rc = get(&lc, &l->out,
				      "layers.%d.linear_attn.out_proj.weight", i,
				      2, H, m->value_dim, 0)) ||
			    (rc = get_f32(&lc, &l->A_log,
					  "layers.%d.linear_attn.A_log", i, Hv)) ||
			    (rc = get_f32(&lc, &l->dt_bias,
					  "layers.%d.linear_attn.dt_bias", i, Hv)))
				return rc;
		}
	}
	return 0;
}

/* ===================================================================== */
/* layout and workspace                                                  */

static void build_layout(eng_model *m)
{
	const qwen35_config *c = &m->c;
	eng_layout *y = &m->lay;
	int kvsz = (int)kern_dtype_size(m->kvdt);
	y->n_sections = y->n_views = 0;
	y->section_bytes = y->row_bytes = 0;
	for (int i = 0; i < c->layers; i++) {
		layer_w *l = &m->L[i];
		if (!l->full) {
			eng_section *s = &y->sec[y->n_sections];
			snprintf(s->name, sizeof s->name, "gdn.S");
			s->layer = i;
			s->dtype = KERN_F32;
			s->ndim = 3;
			s->dims[0] = c->lin_v_heads;
			s->dims[1] = c->lin_k_dim;
			s->dims[2] = c->lin_v_dim;
			s->bytes = (size_t)c->lin_v_heads * c->lin_k_dim *
				   c->lin_v_dim * 4;
			l->sec_S = y->n_sections++;
			l->off_S = y->section_bytes;
			y->section_bytes += s->bytes;
			s = &y->sec[y->n_sections];
			snprintf(s->name, sizeof s->name, "gdn.conv");
			s->layer = i;
			s->dtype = KERN_F32;
			s->ndim = 2;
			s->dims[0] = c->conv_kernel - 1;
			s->dims[1] = m->conv_dim;
			s->bytes = (size_t)(c->conv_kernel - 1) * m->conv_dim * 4;
			l->sec_conv = y->n_sections++;
			l->off_conv = y->section_bytes;
			y->section_bytes += s->bytes;
		} else {
			for (int kv = 0; kv < 2; kv++) {
				eng_view *v = &y->view[y->n_views];
				snprintf(v->name, sizeof v->name,
					 kv ? "attn.V" : "attn.K");
				v->layer = i;
				v->dtype = m->kvdt;
				v->ndim = 3;
				v->dims[0] = 1;
				v->dims[1] = c->n_kv_heads;
				v->dims[2] = c->head_dim;
				v->token_axis = 0;
				v->row_bytes =
					(size_t)c->n_kv_heads * c->head_dim * kvsz;
				y->row_bytes += v->row_bytes;
				if (kv)
					l->view_V = y->n_views++;
				else
					l->view_K = y->n_views++;
			}
		}
	}
}

static size_t align64(size_t n)
{
	return (n + 63) & ~(size_t)63;
}

static int alloc_workspace(eng_model *m)
{
	const qwen35_config *c = &m->c;
	int64_t T = m->T;
	int64_t H = c->hidden;
	/* t0: projections; the widest of GDN [conv_dim + value_dim + 2 Hv],
	 * attention [2 Hq D + 2 Hkv D] and MLP [2 I]. */
	int64_t w_gdn = m->conv_dim + m->value_dim + 2LL * c->lin_v_heads;
	int64_t w_att = 2LL * c->n_heads * c->head_dim +
			2LL * c->n_kv_heads * c->head_dim;
	int64_t w_mlp = 2LL * c->inter;
	int64_t w0 = w_gdn > w_att ? w_gdn : w_att;
	w0 = w0 > w_mlp ? w0 : w_mlp;
	/* t1: conv output / attention q,gate / swiglu; the widest again */
	int64_t w1 = m->conv_dim > 2LL * c->n_heads * c->head_dim
			     ? m->conv_dim
			     : 2LL * c->n_heads * c->head_dim;
	w1 = w1 > c->inter ? w1 : c->inter;
	int64_t w2 = m->value_dim > (int64_t)c->n_heads * c->head_dim
			     ? m->value_dim
			     : (int64_t)c->n_heads * c->head_dim;
	size_t sz[] = {
		align64((size_t)(T * H * 4)),               /* h */
		align64((size_t)(T * H * 4)),               /* xn */
		align64((size_t)(T * w0 * 4)),              /* t0 */
		align64((size_t)(T * w1 * 4)),              /* t1 */
		align64((size_t)(T * w2 * 4)),              /* t2 */
		align64((size_t)(T * w2 * 4)),              /* t3 */
		align64((size_t)(T * H * 4)),               /* t4 */
		align64((size_t)(T * c->lin_v_heads * 4)),  /* beta */
		align64((size_t)(T * c->lin_v_heads * 4)),  /* g */
		align64(m->ops->delta_ws_bytes(m->ctx, m->lay.grid, c->lin_v_heads,
					       c->lin_k_dim, c->lin_v_dim)),
		align64((size_t)(T * 4)),                            /* ids */
		align64((size_t)LOGIT_ROWS * (size_t)c->vocab * 4), /* logits */
	};
	size_t total = 0;
	for (size_t i = 0; i < sizeof sz / sizeof sz[0]; i++)
		total += sz[i];
	int rc = m->ops->alloc(m->ctx, total, &m->ws);
	if (rc)
		return rc;
	m->ws_bytes = total;
	char *p = m->ws;
	void **dst[] = {
		(void **)&m->h,    (void **)&m->xn,   (void **)&m->t0,
		(void **)&m->t1,   (void **)&m->t2,   (void **)&m->t3,
		(void **)&m->t4,   (void **)&m->beta, (void **)&m->g,
		(void **)&m->delta_ws, (void **)&m->ids, (void **)&m->logits,
	};
	_Static_assert(sizeof dst / sizeof dst[0] == sizeof sz / sizeof sz[0],
		       "workspace carve table");
	for (size_t i = 0; i < sizeof sz / sizeof sz[0]; i++) {
		*dst[i] = p;
		p += sz[i];
	}
	return 0;
}

/* ===================================================================== */
/* load / free                                                           */

int eng_model_load(const char *dir, const kern_ops *ops, kern_ctx *ctx,
		   const eng_opts *opts, eng_model **out, char *err)
{
	*out = NULL;
	if (!ops || ops->abi != KERN_ABI_VERSION) {
		moor_errf(err, "backend: contract version %u, engine wants %u",
			  ops ? ops->abi : 0, KERN_ABI_VERSION);
		return MOOR_EVERSION;
	}
	eng_model *m = calloc(1, sizeof *m);
	if (!m)
		return -ENOMEM;
	m->ops = ops;
	m->ctx = ctx;
	m->q = ops->queue(ctx, KERN_Q_COMPUTE);
	m->cq = ops->queue(ctx, KERN_Q_COPY);
	m->dev_id = -1;
	m->load_s = m->t_log = moor_now();
	m->dummy = opts && opts->load_format == ENG_LOAD_DUMMY;
	m->seed = opts ? opts->seed : 0;
	m->progress = opts && opts->progress;
	/* Fused projections where the weights are copied anyway and the
	 * backend runs the SwiGLU into the down projection itself. */
	m->fused = !(ops->caps & KERN_CAP_HOST_MEMORY) && ops->matmul_swiglu;
	int rc = qwen35_config_load(dir, &m->c, err);
	if (rc)
		goto fail;
	const qwen35_config *c = &m->c;
	int grid = opts && opts->grid ? opts->grid : 1024;
	if (grid <= 0 || grid % KERN_GDN_CHUNK) {
		moor_errf(err, "grid %d: must be a positive multiple of %d", grid,
			  KERN_GDN_CHUNK);
		rc = MOOR_ERANGE;
		goto fail;
	}
	int64_t window = opts && opts->window ? opts->window : 32768;
	if (window > c->max_pos)
		window = c->max_pos;
	/* a device backend's default: 4 chunks a forward (an H100, 32k:
	 * 4.40 s against 4.48 a chunk a forward; the products' rows keep
	 * their bits, bench_kern --only rows) */
	int span = opts && opts->span			 ? opts->span
		   : ops->caps & KERN_CAP_HOST_MEMORY ? grid
							 : 4 * grid;
	if (span < grid || span % grid) {
		moor_errf(err, "prefill span %d: must be a multiple of the grid "
			  "(%d)", span, grid);
		rc = MOOR_ERANGE;
		goto fail;
	}
	m->lay.grid = grid;
	m->lay.window = window;
	m->T = span;
	m->act = c->dtype == KERN_BF16 ? KERN_ACT_BF16 : KERN_ACT_F32;
	m->kvdt = c->dtype == KERN_BF16 ? KERN_BF16 : KERN_F32;
	m->key_dim = c->lin_k_heads * c->lin_k_dim;
	m->value_dim = c->lin_v_heads * c->lin_v_dim;
	m->conv_dim = 2 * m->key_dim + m->value_dim;
	m->L = calloc((size_t)c->layers, sizeof *m->L);
	if (!m->L) {
		rc = -ENOMEM;
		goto fail;
	}
	if (m->dummy && !ops->fill_random) {
		moor_errf(err, "backend %s cannot fill dummy weights", ops->name);
		rc = MOOR_EUNSUP;
		goto fail;
	}
	if (!m->dummy && (rc = eng_ckpt_open(dir, &m->ck, err)))
		goto fail;
	/* copied weights: read in blocks by threads, staged in the
	 * backend's pinned memory, uploaded while the next are read */
	eng_wload_cfg wc = {.progress = m->progress};
	if (!m->dummy && !ops->wrap_host &&
	    (rc = eng_wload_new(ops, ctx, &wc, &m->wl)))
		goto fail;
	rc = load_weights(m, err);
	if (rc == 0 && m->wl) {
		eng_wload_stats st;
		rc = eng_wload_run(m->wl, &st, err);
		if (rc == 0 && m->progress)
			moor_info("weights: %.2f GB read and uploaded in %.2f s "
				  "(%.2f GB/s; %d files, %s staging)",
				  (double)st.bytes / 1e9, st.seconds,
				  st.seconds > 0 ? (double)st.bytes / 1e9 /
						       st.seconds
						 : 0.0,
				  st.files, st.pinned ? "pinned" : "pageable");
	}
	eng_wload_free(m->wl);
	m->wl = NULL;
	if (rc == 0)
		rc = ops->sync(m->q);
	if (rc) {
		if (err && !err[0])
			moor_errf(err, "weights: %s", moor_strerror(rc));
		goto fail;
	}
	m->load_s = moor_now() - m->load_s;
	build_layout(m);
	rc = alloc_workspace(m);
	if (rc) {
		moor_errf(err, "workspace for a %lld-token forward: %s",
			  (long long)m->T, moor_strerror(rc));
		goto fail;
	}
	int64_t wmax = c->hidden;
	int64_t wcand[] = {c->inter, m->value_dim,
			   (int64_t)c->n_heads * c->head_dim};
	for (size_t i = 0; i < sizeof wcand / sizeof wcand[0]; i++)
		wmax = wcand[i] > wmax ? wcand[i] : wmax;
	kern_limits lim = {.rows = (int)m->T,
			   .chunk = grid,
			   .width = wmax,
			   .window = window,
			   .q_heads = c->n_heads,
			   .head_dim = c->head_dim,
			   .vocab = c->vocab};
	if (ops->reserve && (rc = ops->reserve(ctx, &lim))) {
		moor_errf(err, "backend scratch: %s", moor_strerror(rc));
		goto fail;
	}
	if ((rc = ops->event_new(ctx, &m->ev_chunk)) ||
	    (rc = ops->event_new(ctx, &m->ev_copied))) {
		moor_errf(err, "events: %s", moor_strerror(rc));
		goto fail;
	}
	m->ids_host = calloc(IDS_RING(m), sizeof *m->ids_host);
	if (!m->ids_host) {
		rc = -ENOMEM;
		goto fail;
	}
	*out = m;
	return 0;
fail:
	eng_model_free(m);
	return rc;
}

void eng_model_free(eng_model *m)
{
	if (!m)
		return;
	if (m->ops) {
		if (m->ops->graph_free)
			for (int i = 0; i < GRAPH_BUCKETS; i++)
				m->ops->graph_free(m->ctx, m->graph[i]);
		m->ops->event_free(m->ctx, m->ev_chunk);
		m->ops->event_free(m->ctx, m->ev_copied);
		for (int i = 0; i < m->n_held; i++)
			release(m, m->held[i].p, m->held[i].wrapped);
		m->ops->free(m->ctx, m->ws);
	}
	free(m->ids_host);
	free(m->held);
	free(m->L);
	eng_wload_free(m->wl);
	eng_ckpt_close(m->ck);
	free(m);
}

const eng_layout *eng_model_layout(const eng_model *m)
{
	return &m->lay;
}

size_t eng_model_workspace_bytes(const eng_model *m)
{
	return m->ws_bytes;
}

int eng_model_span(const eng_model *m)
{
	return (int)m->T;
}

uint64_t eng_model_weight_bytes(const eng_model *m)
{
	return m->weight_bytes;
}

double eng_model_load_seconds(const eng_model *m)
{
	return m->load_s;
}

void eng_model_describe(const eng_model *m, char *out, size_t n)
{
	if (m->ops->describe)
		m->ops->describe(m->ctx, out, n);
	else
		snprintf(out, n, "%s", m->ops->name);
}

int eng_model_vocab(const eng_model *m)
{
	return m->c.vocab;
}

int eng_model_eos(const eng_model *m)
{
	return m->c.eos_id;
}

int eng_seq_alloc(eng_model *m, eng_seq *s)
{
	const eng_layout *y = &m->lay;
	memset(s, 0, sizeof *s);
	s->sec = calloc((size_t)y->n_sections + 1, sizeof *s->sec);
	s->view = calloc((size_t)y->n_views + 1, sizeof *s->view);
	if (!s->sec || !s->view) {
		eng_seq_free(m, s);
		return -ENOMEM;
	}
	int rc = 0;
	for (int i = 0; i < y->n_sections && !rc; i++) {
		rc = m->ops->alloc(m->ctx, y->sec[i].bytes, &s->sec[i]);
		if (!rc)
			rc = m->ops->zero(m->q, s->sec[i], y->sec[i].bytes);
	}
	for (int i = 0; i < y->n_views && !rc; i++) {
		size_t n = y->view[i].row_bytes * (size_t)y->window;
		rc = m->ops->alloc(m->ctx, n, &s->view[i]);
		if (!rc)
			rc = m->ops->zero(m->q, s->view[i], n);
	}
	if (rc)
		eng_seq_free(m, s);
	return rc;
}

void eng_seq_free(eng_model *m, eng_seq *s)
{
	if (!s)
		return;
	const eng_layout *y = &m->lay;
	if (s->sec)
		for (int i = 0; i < y->n_sections; i++)
			m->ops->free(m->ctx, s->sec[i]);
	if (s->view)
		for (int i = 0; i < y->n_views; i++)
			m->ops->free(m->ctx, s->view[i]);
	free(s->sec);
	free(s->view);
	memset(s, 0, sizeof *s);
}

int eng_seq_reset(eng_model *m, eng_seq *s)
{
	const eng_layout *y = &m->lay;
	for (int i = 0; i < y->n_sections; i++) {
		int rc = m->ops->zero(m->q, s->sec[i], y->sec[i].bytes);
		if (rc)
			return rc;
	}
	s->len = 0;
	return 0;
}

/* ===================================================================== */
/* forward                                                               */

#define CK(x)                                                                 \
	do {                                                                  \
		int rc_ = (x);                                                \
		if (rc_)                                                      \
			return rc_;                                           \
	} while (0)

/* The first section write of a chunk waits for the slot copy of the chunk
 * before it (the copy queue reads the sections). */
static int sections_ready(eng_model *m)
{
	if (!m->copy_pending)
		return 0;
	m->copy_pending = 0;
	return m->ops->wait(m->q, m->ev_copied);
}

/* Rows of the piece of a forward at position at (left rows to go): up to
 * the next grid line. The conv and the delta rule run a piece at a time,
 * so that a forward of several chunks runs them on exactly the rows and
 * positions a chunk a forward does (attention cuts its own pieces at the
 * lines of kern_limits.chunk, the grid). */
static int piece_rows(const eng_model *m, int64_t at, int left)
{
	int64_t g = m->lay.grid, next = (at / g + 1) * g;
	return next - at < left ? (int)(next - at) : left;
}

/* After a GDN layer's piece that ends on the line of the forward's next
 * slot inside it (*si), that layer's sections into the slot, on the
 * compute queue: the layer's next piece writes them. */
static int layer_snapshot(eng_model *m, const layer_w *l, const eng_seq *s,
			  int64_t end, int *si)
{
	if (*si >= m->n_in_slots || m->in_slots[*si].line != end)
		return 0;
	const eng_layout *y = &m->lay;
	void *dst = m->in_slots[(*si)++].dst;
	CK(m->ops->copy(m->q, kern_at(dst, l->off_S), s->sec[l->sec_S],
			y->sec[l->sec_S].bytes));
	return m->ops->copy(m->q, kern_at(dst, l->off_conv),
			    s->sec[l->sec_conv], y->sec[l->sec_conv].bytes);
}

static int gdn_layer(eng_model *m, const layer_w *l, eng_seq *s, int T,
		     int64_t pos0, int recurrent)
{
	const kern_ops *o = m->ops;
	kern_queue *q = m->q;
	const qwen35_config *c = &m->c;
	int H = c->hidden, Hk = c->lin_k_heads, Hv = c->lin_v_heads,
	    dk = c->lin_k_dim, dv = c->lin_v_dim, act = m->act;
	int cd = m->conv_dim, vd = m->value_dim;
	/* t0 holds [T, conv_dim] mixed | [T, value_dim] z | [T, Hv] b | a
	 * (fused: one [T, cd + vd + 2 Hv] matrix, each part a column range) */
	int ldm = cd, ldz = vd, ldba = Hv;
	float *mixed = m->t0, *z, *b, *a;
	int li = (int)(l - m->L);
	if (m->fused) {
		int w = cd + vd + 2 * Hv;
		ldm = ldz = ldba = w;
		z = mixed + cd;
		b = z + vd;
		a = b + Hv;
		CK(o->matmul(q, mixed, w, m->xn, H, l->proj.p, l->proj.dt, T, w,
			     H, act));
	} else {
		z = mixed + (size_t)T * cd;
		b = z + (size_t)T * vd;
		a = b + (size_t)T * Hv;
		CK(o->matmul(q, mixed, cd, m->xn, H, l->qkv.p, l->qkv.dt, T, cd,
			     H, act));
		CK(o->matmul(q, z, vd, m->xn, H, l->z.p, l->z.dt, T, vd, H,
			     act));
		CK(o->matmul(q, b, Hv, m->xn, H, l->b.p, l->b.dt, T, Hv, H,
			     act));
		CK(o->matmul(q, a, Hv, m->xn, H, l->a.p, l->a.dt, T, Hv, H,
			     act));
	}
	float *u = m->t1; /* [T, conv_dim] after conv + SiLU */
	float *core = m->t2, *y = m->t3;
	PROBE(m, "qkv", li, mixed, T, cd, ldm);
	PROBE(m, "z", li, z, T, vd, ldz);
	PROBE(m, "b", li, b, T, Hv, ldba);
	PROBE(m, "a", li, a, T, Hv, ldba);
	CK(sections_ready(m));
	/* the conv and the delta rule a piece at a time (piece_rows); the
	 * probes see one piece (probe builds run a chunk a forward) */
	int si = 0;
	for (int off = 0, n; off < T; off += n) {
		n = piece_rows(m, pos0 + off, T - off);
		const float *mx = mixed + (size_t)off * ldm;
		const float *pb = b + (size_t)off * ldba, *pa = a + (size_t)off * ldba;
		float *pu = u + (size_t)off * cd, *beta = m->beta + (size_t)off * Hv,
		      *g = m->g + (size_t)off * Hv;
		float *uq = pu, *uk = pu + m->key_dim, *uv = pu + 2 * m->key_dim;
		/* q and k are normalised in fp32: measured against the bf16
		 * fixture, rounding the normalised values to bf16 multiplies
		 * the logits' error by six */
		int rc = MOOR_EUNSUP;
		if (o->gdn_prep && !PROBING(m))
			rc = o->gdn_prep(q, pu, mx, ldm, s->sec[l->sec_conv],
					 l->conv.p, l->conv.dt, c->conv_kernel,
					 Hk, dk, Hv, dv, 1e-6f,
					 1.0f / sqrtf((float)dk), beta, g, pb, pa,
					 ldba, l->A_log, l->dt_bias, n, act);
		if (rc && rc != MOOR_EUNSUP)
			return rc;
		if (rc) { /* the unfused ops (the fused one's reference) */
			CK(o->conv1d(q, pu, mx, ldm, s->sec[l->sec_conv], l->conv.p,
				     l->conv.dt, n, cd, c->conv_kernel, act));
			PROBE(m, "conv", li, pu, n, cd, cd);
			CK(o->l2norm(q, uq, cd, n, Hk, dk, 1e-6f,
				     1.0f / sqrtf((float)dk), KERN_ACT_F32));
			CK(o->l2norm(q, uk, cd, n, Hk, dk, 1e-6f, 1.0f,
				     KERN_ACT_F32));
			CK(o->gdn_gates(q, beta, g, pb, ldba, pa, ldba, l->A_log,
					l->dt_bias, n, Hv, act));
		}
		PROBE(m, "beta", li, beta, n, Hv, Hv);
		PROBE(m, "g", li, g, n, Hv, Hv);
		float *pc = core + (size_t)off * vd;
		if (recurrent)
			CK(o->delta_recurrent(q, pc, s->sec[l->sec_S], uq, uk, cd,
					      uv, cd, g, beta, n, Hk, Hv, dk, dv,
					      act));
		else
			CK(o->delta_chunked(q, pc, s->sec[l->sec_S], uq, uk, cd,
					    uv, cd, g, beta, n, Hk, Hv, dk, dv,
					    m->delta_ws, act));
		CK(layer_snapshot(m, l, s, pos0 + off + n, &si));
	}
	PROBE(m, "core", li, core, T, vd, vd);
	CK(o->gated_rmsnorm(q, y, core, z, ldz, Hv, l->norm.p, l->norm.dt,
			    T * Hv, dv, c->eps, act));
	PROBE(m, "gnorm", li, y, T, vd, vd);
	CK(o->matmul(q, m->t4, H, y, vd, l->out.p, l->out.dt, T, H, vd, act));
	PROBE(m, "mix_out", li, m->t4, T, H, H);
	return 0;
}

static int attn_layer(eng_model *m, const layer_w *l, eng_seq *s, int T,
		      int64_t pos0)
{
	const kern_ops *o = m->ops;
	kern_queue *q = m->q;
	const qwen35_config *c = &m->c;
	int H = c->hidden, Hq = c->n_heads, Hkv = c->n_kv_heads, D = c->head_dim,
	    act = m->act;
	int qd = Hq * D, kd = Hkv * D;
	float *qg = m->t0;                  /* [T, Hq, 2D] */
	float *k = qg + (size_t)T * 2 * qd; /* [T, Hkv, D] */
	float *v = k + (size_t)T * kd;      /* [T, Hkv, D] */
	float *qo = m->t1, *go = m->t1 + (size_t)T * qd;
	float *out = m->t2;
	int li = (int)(l - m->L);
	if (m->fused && T == 1) {
		/* one row: qg | k | v is the row of one [2 qd + 2 kd] product
		 * (a GEMV's sums do not depend on N: the same bits as three) */
		CK(o->matmul(q, qg, 2 * qd + 2 * kd, m->xn, H, l->qkvw.p,
			     l->qkvw.dt, 1, 2 * qd + 2 * kd, H, act));
	} else {
		CK(o->matmul(q, qg, 2 * qd, m->xn, H, l->q.p, l->q.dt, T, 2 * qd,
			     H, act));
		CK(o->matmul(q, k, kd, m->xn, H, l->k.p, l->k.dt, T, kd, H, act));
		CK(o->matmul(q, v, kd, m->xn, H, l->v.p, l->v.dt, T, kd, H, act));
	}
	PROBE(m, "qg", li, qg, T, 2 * qd, 2 * qd);
	PROBE(m, "k", li, k, T, kd, kd);
	PROBE(m, "v", li, v, T, kd, kd);
	/* the fused prologue, a decode step's row or a prefill chunk's
	 * (the same bits: case_prep). H100, 1,024 rows at the 27B's shapes
	 * (bench_kern --only elem): 0.0745 ms against 0.1224 for the seven
	 * ops below */
	int rc = MOOR_EUNSUP;
	if (o->attn_prep && l->q_norm.dt == l->k_norm.dt && !PROBING(m))
		rc = o->attn_prep(q, qo, go, qg, k, v, l->q_norm.p, l->k_norm.p,
				  l->q_norm.dt, s->view[l->view_K],
				  s->view[l->view_V], m->kvdt, T, Hq, Hkv, D,
				  c->rot_dim, pos0, c->rope_theta, c->eps, act);
	if (rc && rc != MOOR_EUNSUP)
		return rc;
	if (rc) { /* the unfused ops (the fused one's reference) */
		CK(o->split_qgate(q, qo, go, qg, T, Hq, D));
		CK(o->rmsnorm(q, qo, D, qo, D, l->q_norm.p, l->q_norm.dt,
			      T * Hq, D, c->eps, 1, act));
		CK(o->rmsnorm(q, k, D, k, D, l->k_norm.p, l->k_norm.dt, T * Hkv,
			      D, c->eps, 1, act));
		PROBE(m, "qn", li, qo, T, qd, qd);
		PROBE(m, "kn", li, k, T, kd, kd);
		CK(o->rope(q, qo, qd, T, Hq, D, c->rot_dim, pos0, c->rope_theta,
			   act));
		CK(o->rope(q, k, kd, T, Hkv, D, c->rot_dim, pos0, c->rope_theta,
			   act));
		PROBE(m, "qr", li, qo, T, qd, qd);
		PROBE(m, "kr", li, k, T, kd, kd);
		CK(o->kv_write(q, s->view[l->view_K], m->kvdt, pos0, k, kd, T,
			       kd));
		CK(o->kv_write(q, s->view[l->view_V], m->kvdt, pos0, v, kd, T,
			       kd));
	}
	/* one call: a backend that cuts keys into segments does so a piece
	 * at a time (ops.h) */
	CK(o->attention(q, out, qo, qd, s->view[l->view_K], s->view[l->view_V],
			m->kvdt, T, pos0, Hq, Hkv, D, 1.0f / sqrtf((float)D),
			act));
	PROBE(m, "att", li, out, T, qd, qd);
	CK(o->sigmoid_mul(q, out, out, go, (size_t)T * qd, act));
	PROBE(m, "gated", li, out, T, qd, qd);
	CK(o->matmul(q, m->t4, H, out, qd, l->o.p, l->o.dt, T, H, qd, act));
	PROBE(m, "mix_out", li, m->t4, T, H, H);
	return 0;
}

/* The MLP as separate ops: gate | up in one product and the SwiGLU on
 * the down projection's way in (fused weights), or gate, up, swiglu and
 * down. */
static int mlp_ops(eng_model *m, const layer_w *l, int T)
{
	const kern_ops *o = m->ops;
	kern_queue *q = m->q;
	int H = m->c.hidden, I = m->c.inter, act = m->act;
	int li = (int)(l - m->L);
	if (m->fused) {
		float *gate = m->t0, *up = m->t0 + I;
		CK(o->matmul(q, m->t0, 2 * I, m->xn, H, l->gu.p, l->gu.dt, T,
			     2 * I, H, act));
		PROBE(m, "gate", li, gate, T, I, 2 * I);
		PROBE(m, "up", li, up, T, I, 2 * I);
		return o->matmul_swiglu(q, m->t4, H, gate, up, 2 * I, l->down.p,
					l->down.dt, T, H, I, act);
	}
	float *gate = m->t0, *up = m->t0 + (size_t)T * I;
	CK(o->matmul(q, gate, I, m->xn, H, l->gate.p, l->gate.dt, T, I, H,
		     act));
	CK(o->matmul(q, up, I, m->xn, H, l->up.p, l->up.dt, T, I, H, act));
	PROBE(m, "gate", li, gate, T, I, I);
	PROBE(m, "up", li, up, T, I, I);
	CK(o->swiglu(q, m->t1, gate, up, (size_t)T * I, act));
	PROBE(m, "act", li, m->t1, T, I, I);
	return o->matmul(q, m->t4, H, m->t1, I, l->down.p, l->down.dt, T, H, I,
			 act);
}

/* The MLP into t4: the backend's one op where it has it (prefill on CUDA:
 * the same bits as mlp_ops' fused path), else mlp_ops. */
static int mlp(eng_model *m, const layer_w *l, int T)
{
	const kern_ops *o = m->ops;
	int H = m->c.hidden, I = m->c.inter;
	int li = (int)(l - m->L);
	int rc = MOOR_EUNSUP;
	if (m->fused && o->mlp && l->gu.dt == l->down.dt && !PROBING(m))
		rc = o->mlp(m->q, m->t4, H, m->xn, H, m->t0, l->gu.p, l->down.p,
			    l->gu.dt, T, H, I, m->act);
	if (rc == MOOR_EUNSUP)
		rc = mlp_ops(m, l, T);
	if (rc)
		return rc;
	PROBE(m, "mlp_out", li, m->t4, T, H, H);
	return 0;
}

/* Logits of rows [r0, r0 + n) of the normed final state into host memory,
 * or (dst NULL, n 1) into logits row 0, kept for eng_model_sample. */
static int head_rows(eng_model *m, int r0, int n, float *dst)
{
	const kern_ops *o = m->ops;
	int H = m->c.hidden, V = m->c.vocab;
	for (int r = 0; r < n; r += LOGIT_ROWS) {
		int k = n - r < LOGIT_ROWS ? n - r : LOGIT_ROWS;
		CK(o->matmul(m->q, m->logits, V, m->xn + (size_t)(r0 + r) * H, H,
			     m->head.p, m->head.dt, k, V, H, KERN_ACT_F32));
		if (dst)
			CK(o->download(m->q, dst + (size_t)r * V, m->logits,
				       (size_t)k * V * 4));
	}
	m->logits_kept = n == 1;
	return 0;
}

/* h = rnd(h + x); xn = rmsnorm(h; w) over T rows: fused where the backend
 * has it, the same bits either way. The probes between the two (h, named
 * p1 of layer l1 and p2 of layer l2) see h before the norm reads it, so a
 * probe that overwrites h moves xn too (the probe build is the CPU's, which
 * runs the unfused pair). */
static int add_norm(eng_model *m, const float *x, const wt *w, int T,
		    const char *p1, int l1, const char *p2, int l2)
{
	const kern_ops *o = m->ops;
	const qwen35_config *c = &m->c;
	int H = c->hidden, act = m->act;
	if (o->add_rmsnorm) {
		CK(o->add_rmsnorm(m->q, m->h, x, m->xn, w->p, w->dt, T, H,
				  c->eps, act));
	} else {
		CK(o->add(m->q, m->h, x, (size_t)T * H, act));
	}
	PROBE(m, p1, l1, m->h, T, H, H);
	if (p2)
		PROBE(m, p2, l2, m->h, T, H, H);
	if (o->add_rmsnorm)
		return 0;
	return o->rmsnorm(m->q, m->xn, H, m->h, H, w->p, w->dt, T, H, c->eps, 1,
			  act);
}

/* The layers of one forward of T <= m->T tokens at pos0 (a chunk, or
 * whole chunks from a grid line), from the ids in m->ids (device) to the
 * final-normed state in xn; the slots m->in_slots on lines inside it
 * are filled as each GDN layer passes them. */
static int forward_layers(eng_model *m, eng_seq *s, int T, int64_t pos0,
			  int recurrent)
{
	const kern_ops *o = m->ops;
	const qwen35_config *c = &m->c;
	int H = c->hidden, act = m->act;
#ifdef ENG_PROBE
	m->probe_pos = pos0;
#endif
	CK(o->embed(m->q, m->h, m->embed.p, m->embed.dt, m->ids, T, H, c->vocab));
	PROBE(m, "x_in", 0, m->h, T, H, H);
	CK(o->rmsnorm(m->q, m->xn, H, m->h, H, m->L[0].in_norm.p,
		      m->L[0].in_norm.dt, T, H, c->eps, 1, act));
	for (int i = 0; i < c->layers; i++) {
		const layer_w *l = &m->L[i];
		PROBE(m, "xn1", i, m->xn, T, H, H);
		if (l->full)
			CK(attn_layer(m, l, s, T, pos0));
		else
			CK(gdn_layer(m, l, s, T, pos0, recurrent));
		CK(add_norm(m, m->t4, &l->post_norm, T, "h1", i, NULL, 0));
		PROBE(m, "xn2", i, m->xn, T, H, H);
		CK(mlp(m, l, T));
		int more = i + 1 < c->layers;
		CK(add_norm(m, m->t4, more ? &m->L[i + 1].in_norm : &m->final_norm,
			    T, "x_out", i, more ? "x_in" : NULL, i + 1));
	}
	return 0;
}

/* One forward of T <= m->T tokens at s->len (the ids already in m->ids):
 * a chunk, or whole chunks from a grid line. */
static int forward_chunk(eng_model *m, eng_seq *s, int T, float *logits,
			 int mode, int recurrent)
{
	int64_t pos0 = s->len;
	m->logits_kept = 0;
	CK(forward_layers(m, s, T, pos0, recurrent));
	s->len = pos0 + T;
	if (mode == ENG_LOGITS_NONE)
		return 0;
	int r0 = mode == ENG_LOGITS_ALL ? 0 : T - 1;
	int n = mode == ENG_LOGITS_ALL ? T : 1;
#ifdef ENG_PROBE
	m->probe_pos = pos0 + r0;
#endif
	PROBE(m, "final", -1, m->xn + (size_t)r0 * m->c.hidden, n, m->c.hidden,
	      m->c.hidden);
	return head_rows(m, r0, n, mode == ENG_LOGITS_KEEP ? NULL : logits);
}

/* Copies the live sections to a slot, back to back in layout order, on the
 * copy queue once the compute queue has finished the chunk; the next
 * section write waits for it (sections_ready). */
static int fill_slot(eng_model *m, const eng_seq *s, void *dst)
{
	const kern_ops *o = m->ops;
	CK(o->record(m->q, m->ev_chunk));
	CK(o->wait(m->cq, m->ev_chunk));
	size_t off = 0;
	for (int i = 0; i < m->lay.n_sections; i++) {
		CK(o->copy(m->cq, kern_at(dst, off), s->sec[i],
			   m->lay.sec[i].bytes));
		off += m->lay.sec[i].bytes;
	}
	CK(o->record(m->cq, m->ev_copied));
	m->copy_pending = 1;
	return 0;
}

static int ids_check(const eng_model *m, const int32_t *ids, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= m->c.vocab)
			return MOOR_ERANGE;
	return 0;
}

/* Stages T ids in the host ring and uploads them to m->ids. */
static int ids_upload(eng_model *m, const int32_t *ids, int T)
{
	if (m->ids_at + T > (int64_t)IDS_RING(m)) {
		CK(m->ops->sync(m->q)); /* every stretch has been read */
		m->ids_at = 0;
	}
	int32_t *src = m->ids_host + m->ids_at;
	m->ids_at += T;
	memcpy(src, ids, (size_t)T * sizeof *ids);
	m->dev_id = -1;
	return m->ops->upload(m->q, m->ids, src, (size_t)T * 4);
}

int eng_prefill(eng_model *m, eng_seq *s, const int32_t *ids, int64_t n,
		float *logits, int mode)
{
	return eng_prefill_slots(m, s, ids, n, logits, mode, NULL, 0, NULL);
}

int eng_prefill_slots(eng_model *m, eng_seq *s, const int32_t *ids,
		      int64_t n, float *logits, int mode, const eng_slot *slots,
		      int n_slots, int *n_filled)
{
	int filled = 0;
	if (n_filled)
		*n_filled = 0;
	if (n <= 0 || mode < ENG_LOGITS_NONE || mode > ENG_LOGITS_KEEP)
		return MOOR_ERANGE;
	if (s->len < 0 || s->len + n > m->lay.window)
		return MOOR_ERANGE;
	if ((mode == ENG_LOGITS_LAST || mode == ENG_LOGITS_ALL) && !logits)
		return MOOR_ERANGE;
	CK(ids_check(m, ids, n));
	int64_t grid = m->lay.grid, done = 0;
	while (done < n) {
		/* up to the next absolute grid line; whole chunks from a line,
		 * up to a span of them in one forward (a chunk's rows in a
		 * longer forward have a chunk's bits: eng_opts.span) */
		int64_t next = (s->len / grid + 1) * grid;
		int64_t T = next - s->len;
		if (T > n - done)
			T = n - done;
		if (T == grid) {
			int64_t whole = (n - done) / grid * grid;
			T = whole < m->T ? whole : m->T;
		}
		int last = done + T == n;
		int cm = mode == ENG_LOGITS_ALL ? ENG_LOGITS_ALL
			 : last		       ? mode
						       : ENG_LOGITS_NONE;
		float *dst = mode == ENG_LOGITS_ALL
				     ? logits + (size_t)done * m->c.vocab
				     : logits;
		/* the slots on the lines inside this forward, filled layer by
		 * layer as it passes them */
		int in = filled;
		while (in < n_slots && slots[in].line > s->len &&
		       slots[in].line < s->len + T && slots[in].line % grid == 0)
			in++;
		CK(ids_upload(m, ids + done, (int)T));
		m->in_slots = slots + filled;
		m->n_in_slots = in - filled;
		int rc = forward_chunk(m, s, (int)T, dst, cm, 0);
		m->in_slots = NULL;
		m->n_in_slots = 0;
		if (rc)
			return rc;
		filled = in;
		if (n_filled)
			*n_filled = filled;
		done += T;
		if (filled < n_slots && slots[filled].line == s->len) {
			CK(fill_slot(m, s, slots[filled].dst));
			filled++;
			if (n_filled)
				*n_filled = filled;
		}
	}
	/* a copy still running is waited for by the next chunk's first
	 * section write, or by eng_model_sync */
	return 0;
}

/* ---- decode ---- */

/* The graph bucket of a step at position pos: bucket b holds lengths up to
 * 1024 << b (capped at the window). */
static int graph_bucket(const eng_model *m, int64_t pos, int64_t *max_len)
{
	int b = 0;
	int64_t cap = 1024;
	while (cap < pos + 1 && b + 1 < GRAPH_BUCKETS) {
		cap <<= 1;
		b++;
	}
	*max_len = cap < m->lay.window ? cap : m->lay.window;
	return b;
}

/* The graphs capture the sequence's buffer pointers: a different sequence
 * (or the same one moved) drops them. */
static uint64_t seq_sig(const eng_model *m, const eng_seq *s)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (int i = 0; i < m->lay.n_sections; i++)
		h = (h ^ (uint64_t)(uintptr_t)s->sec[i]) * 0x100000001b3ull;
	for (int i = 0; i < m->lay.n_views; i++)
		h = (h ^ (uint64_t)(uintptr_t)s->view[i]) * 0x100000001b3ull;
	return h;
}

static void graphs_drop(eng_model *m)
{
	for (int i = 0; i < GRAPH_BUCKETS; i++) {
		m->ops->graph_free(m->ctx, m->graph[i]);
		m->graph[i] = NULL;
	}
}

/* One decode step as a graph launch: captured at the bucket's first use
 * (the capture runs nothing), then launched at s->len. */
static int decode_graph(eng_model *m, eng_seq *s)
{
	const kern_ops *o = m->ops;
	uint64_t sig = seq_sig(m, s);
	if (sig != m->graph_sig) {
		graphs_drop(m);
		m->graph_sig = sig;
	}
	int64_t pos = s->len, max_len;
	int b = graph_bucket(m, pos, &max_len);
	/* a slot copy still running is waited for outside any capture (a
	 * captured wait on work recorded before the capture is refused) */
	CK(sections_ready(m));
	if (!m->graph[b]) {
		CK(o->graph_begin(m->q, pos, max_len));
		int rc = forward_layers(m, s, 1, pos, 1);
		if (rc == 0)
			rc = o->matmul(m->q, m->logits, m->c.vocab, m->xn,
				       m->c.hidden, m->head.p, m->head.dt, 1,
				       m->c.vocab, m->c.hidden, KERN_ACT_F32);
		kern_graph *g = NULL;
		int rc2 = o->graph_end(m->q, &g);
		if (rc || rc2) {
			o->graph_free(m->ctx, g);
			return rc ? rc : rc2;
		}
		m->graph[b] = g;
	}
	CK(o->graph_launch(m->q, m->graph[b], pos));
	s->len = pos + 1;
	m->logits_kept = 1;
	return 0;
}

int eng_decode(eng_model *m, eng_seq *s, int32_t id, float *logits)
{
	if (s->len < 0 || s->len + 1 > m->lay.window)
		return MOOR_ERANGE;
	CK(ids_check(m, &id, 1));
	if (m->dev_id != id)
		CK(ids_upload(m, &id, 1));
	m->dev_id = -1; /* the step's input is consumed */
	if (m->ops->graph_begin) {
		CK(decode_graph(m, s));
		if (logits)
			CK(m->ops->download(m->q, logits, m->logits,
					    (size_t)m->c.vocab * 4));
		return 0;
	}
	return forward_chunk(m, s, 1, logits,
			     logits ? ENG_LOGITS_LAST : ENG_LOGITS_KEEP, 1);
}

int eng_model_sample(eng_model *m, eng_sampler *smp, int32_t *out)
{
	if (!m->logits_kept || smp->vocab != m->c.vocab)
		return MOOR_ERANGE;
	int32_t t = 0;
	CK(m->ops->sample(m->q, m->logits, m->c.vocab, &smp->k,
			  eng_sampler_draw(smp), m->ids, &t));
	m->dev_id = t; /* ids[0] holds it: the next decode step skips its
			* upload */
	*out = t;
	return 0;
}

int eng_model_logprobs(eng_model *m, int32_t tok, int n_top, float *lp,
		       int32_t *ids)
{
	if (!m->logits_kept)
		return MOOR_ERANGE;
	return m->ops->logprobs(m->q, m->logits, m->c.vocab, tok, n_top, lp,
				ids);
}

int eng_model_sync(eng_model *m)
{
	int rc = m->ops->sync(m->cq);
	int rc2 = m->ops->sync(m->q);
	return rc ? rc : rc2;
}
