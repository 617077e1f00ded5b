/* qwen35.c: the Qwen3.5 dense text model (SPEC-qwen35.md) behind eng.h.
 *
 * Weights are mmapped and handed to the backend with wrap_host (the CPU
 * backend points into the file). Every buffer the forward uses is carved
 * from one workspace allocated at load for a chunk of `grid` tokens, so
 * nothing is allocated in prefill or decode.
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
#include "moor.h"

/* ===================================================================== */
/* weights                                                               */

typedef struct wt {
	const void *p; /* device pointer */
	int dt;
} wt;

typedef struct layer_w {
	int full;
	wt in_norm, post_norm, gate, up, down;
	/* GDN */
	wt qkv, z, b, a, conv, norm, out;
	float *A_log, *dt_bias; /* device fp32 [Hv] */
	/* attention */
	wt q, k, v, o, q_norm, k_norm;
	int sec_S, sec_conv; /* section indices, GDN */
	int view_K, view_V;  /* view indices, attention */
} layer_w;

struct eng_model {
	const kern_ops *ops;
	kern_ctx *ctx;
	kern_queue *q;
	qwen35_config c;
	eng_ckpt *ck;
	int act;  /* KERN_ACT_BF16 for bf16 models */
	int kvdt; /* view dtype */
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

	/* workspace, [grid] tokens (device) */
	int64_t T; /* chunk capacity = grid */
	void *ws;
	size_t ws_bytes; /* the whole carve, bytes */
	float *h, *xn, *t0, *t1, *t2, *t3, *t4, *beta, *g;
	void *delta_ws;
	int32_t *ids;
	float *logits; /* [LOGIT_ROWS, V] */
#ifdef ENG_PROBE
	int64_t probe_pos; /* position of the chunk's first token */
#endif
};

#define LOGIT_ROWS 8

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
#else
#define PROBE(m, name, layer, x, rows, cols, ld) ((void)(layer))
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

/* Device copy of host bytes, through wrap_host where the backend has it. */
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
	return rc;
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
	int64_t shape[3] = {d0, d1, d2};
	const eng_tensor *t;
	int rc = eng_ckpt_get(lc->m->ck, name, ndim, shape, &t, lc->err);
	if (rc)
		return rc;
	void *p;
	rc = to_device(lc->m, t->data, t->nbytes, &p);
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
	const eng_tensor *t;
	int rc = eng_ckpt_get(lc->m->ck, name, 1, &n, &t, lc->err);
	if (rc)
		return rc;
	float tmp[4096];
	if (n > 4096) {
		moor_errf(lc->err, "%s: tensor %s: %lld heads is too many",
			  t->file, name, (long long)n);
		return MOOR_ESHAPE;
	}
	const unsigned char *src = t->data;
	for (int64_t i = 0; i < n; i++) {
		uint16_t h;
		if (t->dtype == KERN_F32) {
			memcpy(&tmp[i], src + 4 * i, 4);
		} else {
			memcpy(&h, src + 2 * i, 2);
			tmp[i] = t->dtype == KERN_BF16 ? moor_bf16_to_f32(h)
						       : moor_f16_to_f32(h);
		}
	}
	void *p;
	rc = lc->m->ops->alloc(lc->m->ctx, (size_t)n * 4, &p);
	if (rc == 0 && (rc = keep(lc->m, p, 0)))
		lc->m->ops->free(lc->m->ctx, p);
	if (rc == 0)
		rc = lc->m->ops->upload(lc->m->q, p, tmp, (size_t)n * 4);
	if (rc) {
		moor_errf(lc->err, "tensor %s: %s", name, moor_strerror(rc));
		return rc;
	}
	*out = p;
	return 0;
}

static int load_weights(eng_model *m, char *err)
{
	const qwen35_config *c = &m->c;
	loadctx lc = {m, prefix_of(m->ck), err};
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
		    (rc = get(&lc, &l->gate, "layers.%d.mlp.gate_proj.weight", i,
			      2, I, H, 0)) ||
		    (rc = get(&lc, &l->up, "layers.%d.mlp.up_proj.weight", i, 2,
			      I, H, 0)) ||
		    (rc = get(&lc, &l->down, "layers.%d.mlp.down_proj.weight", i,
			      2, H, I, 0)))
			return rc;
		if (l->full) {
			if ((rc = get(&lc, &l->q, "layers.%d.self_attn.q_proj.weight",
				      i, 2, (int64_t)Hq * D * 2, H, 0)) ||
			    (rc = get(&lc, &l->k, "layers.%d.self_attn.k_proj.weight",
				      i, 2, (int64_t)Hkv * D, H, 0)) ||
			    (rc = get(&lc, &l->v, "layers.%d.self_attn.v_proj.weight",
				      i, 2, (int64_t)Hkv * D, H, 0)) ||
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
			if ((rc = get(&lc, &l->qkv,
				      "layers.%d.linear_attn.in_proj_qkv.weight", i,
				      2, m->conv_dim, H, 0)) ||
			    (rc = get(&lc, &l->z,
				      "layers.%d.linear_attn.in_proj_z.weight", i,
				      2, m->value_dim, H, 0)) ||
			    (rc = get(&lc, &l->b,
				      "layers.%d.linear_attn.in_proj_b.weight", i,
				      2, Hv, H, 0)) ||
			    (rc = get(&lc, &l->a,
				      "layers.%d.linear_attn.in_proj_a.weight", i,
				      2, Hv, H, 0)) ||
			    (rc = get(&lc, &l->conv,
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
		align64(m->ops->delta_ws_bytes(c->lin_v_heads, c->lin_k_dim,
					       c->lin_v_dim)),
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
	m->q = ops->queue(ctx);
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
	m->lay.grid = grid;
	m->lay.window = window;
	m->T = grid;
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
	rc = eng_ckpt_open(dir, &m->ck, err);
	if (rc)
		goto fail;
	rc = load_weights(m, err);
	if (rc)
		goto fail;
	build_layout(m);
	rc = alloc_workspace(m);
	if (rc) {
		moor_errf(err, "workspace for a %d-token chunk: %s", grid,
			  moor_strerror(rc));
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
		for (int i = 0; i < m->n_held; i++)
			release(m, m->held[i].p, m->held[i].wrapped);
		m->ops->free(m->ctx, m->ws);
	}
	free(m->held);
	free(m->L);
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

static int gdn_layer(eng_model *m, const layer_w *l, eng_seq *s, int T,
		     int recurrent)
{
	const kern_ops *o = m->ops;
	kern_queue *q = m->q;
	const qwen35_config *c = &m->c;
	int H = c->hidden, Hk = c->lin_k_heads, Hv = c->lin_v_heads,
	    dk = c->lin_k_dim, dv = c->lin_v_dim, act = m->act;
	int cd = m->conv_dim, vd = m->value_dim;
	/* t0 holds [T, conv_dim] mixed | [T, value_dim] z | [T, Hv] b | a */
	float *mixed = m->t0;
	float *z = mixed + (size_t)T * cd;
	float *b = z + (size_t)T * vd;
	float *a = b + (size_t)T * Hv;
	float *u = m->t1; /* [T, conv_dim] after conv + SiLU */
	float *core = m->t2, *y = m->t3;
	int li = (int)(l - m->L);
	CK(o->matmul(q, mixed, cd, m->xn, H, l->qkv.p, l->qkv.dt, T, cd, H, act));
	CK(o->matmul(q, z, vd, m->xn, H, l->z.p, l->z.dt, T, vd, H, act));
	CK(o->matmul(q, b, Hv, m->xn, H, l->b.p, l->b.dt, T, Hv, H, act));
	CK(o->matmul(q, a, Hv, m->xn, H, l->a.p, l->a.dt, T, Hv, H, act));
	PROBE(m, "qkv", li, mixed, T, cd, cd);
	PROBE(m, "z", li, z, T, vd, vd);
	PROBE(m, "b", li, b, T, Hv, Hv);
	PROBE(m, "a", li, a, T, Hv, Hv);
	CK(o->conv1d(q, u, mixed, cd, s->sec[l->sec_conv], l->conv.p,
		     l->conv.dt, T, cd, c->conv_kernel, act));
	PROBE(m, "conv", li, u, T, cd, cd);
	float *uq = u, *uk = u + m->key_dim, *uv = u + 2 * m->key_dim;
	/* q and k are normalised in fp32: measured against the bf16 fixture,
	 * rounding the normalised values to bf16 multiplies the logits' error
	 * by six */
	CK(o->l2norm(q, uq, cd, T, Hk, dk, 1e-6f, 1.0f / sqrtf((float)dk),
		     KERN_ACT_F32));
	CK(o->l2norm(q, uk, cd, T, Hk, dk, 1e-6f, 1.0f, KERN_ACT_F32));
	CK(o->gdn_gates(q, m->beta, m->g, b, Hv, a, Hv, l->A_log, l->dt_bias, T,
			Hv, act));
	PROBE(m, "beta", li, m->beta, T, Hv, Hv);
	PROBE(m, "g", li, m->g, T, Hv, Hv);
	if (recurrent)
		CK(o->delta_recurrent(q, core, s->sec[l->sec_S], uq, uk, cd, uv,
				      cd, m->g, m->beta, T, Hk, Hv, dk, dv, act));
	else
		CK(o->delta_chunked(q, core, s->sec[l->sec_S], uq, uk, cd, uv, cd,
				    m->g, m->beta, T, Hk, Hv, dk, dv, m->delta_ws,
				    act));
	PROBE(m, "core", li, core, T, vd, vd);
	CK(o->gated_rmsnorm(q, y, core, z, l->norm.p, l->norm.dt, T * Hv, dv,
			    c->eps, act));
	PROBE(m, "gnorm", li, y, T, vd, vd);
	CK(o->matmul(q, m->t4, H, y, vd, l->out.p, l->out.dt, T, H, vd, act));
	PROBE(m, "mix_out", li, m->t4, T, H, H);
	return o->add(q, m->h, m->t4, (size_t)T * H, act);
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
	CK(o->matmul(q, qg, 2 * qd, m->xn, H, l->q.p, l->q.dt, T, 2 * qd, H, act));
	CK(o->matmul(q, k, kd, m->xn, H, l->k.p, l->k.dt, T, kd, H, act));
	CK(o->matmul(q, v, kd, m->xn, H, l->v.p, l->v.dt, T, kd, H, act));
	PROBE(m, "qg", li, qg, T, 2 * qd, 2 * qd);
	PROBE(m, "k", li, k, T, kd, kd);
	PROBE(m, "v", li, v, T, kd, kd);
	CK(o->split_qgate(q, qo, go, qg, T, Hq, D));
	CK(o->rmsnorm(q, qo, D, qo, D, l->q_norm.p, l->q_norm.dt, T * Hq, D,
		      c->eps, 1, act));
	CK(o->rmsnorm(q, k, D, k, D, l->k_norm.p, l->k_norm.dt, T * Hkv, D,
		      c->eps, 1, act));
	PROBE(m, "qn", li, qo, T, qd, qd);
	PROBE(m, "kn", li, k, T, kd, kd);
	CK(o->rope(q, qo, qd, T, Hq, D, c->rot_dim, pos0, c->rope_theta, act));
	CK(o->rope(q, k, kd, T, Hkv, D, c->rot_dim, pos0, c->rope_theta, act));
	PROBE(m, "qr", li, qo, T, qd, qd);
	PROBE(m, "kr", li, k, T, kd, kd);
	CK(o->kv_write(q, s->view[l->view_K], m->kvdt, pos0, k, kd, T, kd));
	CK(o->kv_write(q, s->view[l->view_V], m->kvdt, pos0, v, kd, T, kd));
	CK(o->attention(q, out, qo, qd, s->view[l->view_K], s->view[l->view_V],
			m->kvdt, T, pos0, Hq, Hkv, D, 1.0f / sqrtf((float)D),
			act));
	PROBE(m, "att", li, out, T, qd, qd);
	CK(o->sigmoid_mul(q, out, out, go, (size_t)T * qd, act));
	PROBE(m, "gated", li, out, T, qd, qd);
	CK(o->matmul(q, m->t4, H, out, qd, l->o.p, l->o.dt, T, H, qd, act));
	PROBE(m, "mix_out", li, m->t4, T, H, H);
	return o->add(q, m->h, m->t4, (size_t)T * H, act);
}

static int mlp(eng_model *m, const layer_w *l, int T)
{
	const kern_ops *o = m->ops;
	kern_queue *q = m->q;
	int H = m->c.hidden, I = m->c.inter, act = m->act;
	float *gate = m->t0, *up = m->t0 + (size_t)T * I;
	int li = (int)(l - m->L);
	CK(o->matmul(q, gate, I, m->xn, H, l->gate.p, l->gate.dt, T, I, H, act));
	CK(o->matmul(q, up, I, m->xn, H, l->up.p, l->up.dt, T, I, H, act));
	PROBE(m, "gate", li, gate, T, I, I);
	PROBE(m, "up", li, up, T, I, I);
	CK(o->swiglu(q, m->t1, gate, up, (size_t)T * I, act));
	PROBE(m, "act", li, m->t1, T, I, I);
	CK(o->matmul(q, m->t4, H, m->t1, I, l->down.p, l->down.dt, T, H, I, act));
	PROBE(m, "mlp_out", li, m->t4, T, H, H);
	return o->add(q, m->h, m->t4, (size_t)T * H, act);
}

/* Logits of rows [r0, r0 + n) of the final hidden state into host memory. */
static int head_rows(eng_model *m, int r0, int n, float *dst)
{
	const kern_ops *o = m->ops;
	int H = m->c.hidden, V = m->c.vocab;
	for (int r = 0; r < n; r += LOGIT_ROWS) {
		int k = n - r < LOGIT_ROWS ? n - r : LOGIT_ROWS;
		CK(o->matmul(m->q, m->logits, V, m->xn + (size_t)(r0 + r) * H, H,
			     m->head.p, m->head.dt, k, V, H, KERN_ACT_F32));
		CK(o->download(m->q, dst + (size_t)r * V, m->logits,
			       (size_t)k * V * 4));
	}
	return 0;
}

/* One chunk of T <= m->T tokens at s->len. */
static int forward_chunk(eng_model *m, eng_seq *s, const int32_t *ids, int T,
			 float *logits, int mode, int recurrent)
{
	const kern_ops *o = m->ops;
	const qwen35_config *c = &m->c;
	int H = c->hidden, act = m->act;
	int64_t pos0 = s->len;
#ifdef ENG_PROBE
	m->probe_pos = pos0;
#endif
	CK(o->upload(m->q, m->ids, ids, (size_t)T * 4));
	CK(o->embed(m->q, m->h, m->embed.p, m->embed.dt, m->ids, T, H, c->vocab));
	for (int i = 0; i < c->layers; i++) {
		const layer_w *l = &m->L[i];
		PROBE(m, "x_in", i, m->h, T, H, H);
		CK(o->rmsnorm(m->q, m->xn, H, m->h, H, l->in_norm.p, l->in_norm.dt,
			      T, H, c->eps, 1, act));
		PROBE(m, "xn1", i, m->xn, T, H, H);
		if (l->full)
			CK(attn_layer(m, l, s, T, pos0));
		else
			CK(gdn_layer(m, l, s, T, recurrent));
		PROBE(m, "h1", i, m->h, T, H, H);
		CK(o->rmsnorm(m->q, m->xn, H, m->h, H, l->post_norm.p,
			      l->post_norm.dt, T, H, c->eps, 1, act));
		PROBE(m, "xn2", i, m->xn, T, H, H);
		CK(mlp(m, l, T));
		PROBE(m, "x_out", i, m->h, T, H, H);
	}
	s->len = pos0 + T;
	if (mode == ENG_LOGITS_NONE)
		return 0;
	int r0 = mode == ENG_LOGITS_LAST ? T - 1 : 0;
	int n = mode == ENG_LOGITS_LAST ? 1 : T;
	CK(o->rmsnorm(m->q, m->xn + (size_t)r0 * H, H, m->h + (size_t)r0 * H, H,
		      m->final_norm.p, m->final_norm.dt, n, H, c->eps, 1, act));
#ifdef ENG_PROBE
	m->probe_pos = pos0 + r0;
#endif
	PROBE(m, "final", -1, m->xn + (size_t)r0 * H, n, H, H);
	return head_rows(m, r0, n, logits);
}

/* Copies the live sections to a slot, back to back in layout order. */
static int fill_slot(eng_model *m, const eng_seq *s, void *dst)
{
	size_t off = 0;
	for (int i = 0; i < m->lay.n_sections; i++) {
		CK(m->ops->copy(m->q, kern_at(dst, off), s->sec[i],
				m->lay.sec[i].bytes));
		off += m->lay.sec[i].bytes;
	}
	return 0;
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
	if (n <= 0)
		return MOOR_ERANGE;
	if (s->len < 0 || s->len + n > m->lay.window)
		return MOOR_ERANGE;
	if (mode != ENG_LOGITS_NONE && !logits)
		return MOOR_ERANGE;
	int64_t grid = m->lay.grid, done = 0;
	while (done < n) {
		/* up to the next absolute grid line */
		int64_t next = (s->len / grid + 1) * grid;
		int64_t T = next - s->len;
		if (T > n - done)
			T = n - done;
		int last = done + T == n;
		int cm = mode == ENG_LOGITS_ALL ? ENG_LOGITS_ALL
			 : last		       ? mode
						       : ENG_LOGITS_NONE;
		float *dst = mode == ENG_LOGITS_ALL
				     ? logits + (size_t)done * m->c.vocab
				     : logits;
		CK(forward_chunk(m, s, ids + done, (int)T, dst, cm, 0));
		done += T;
		if (filled < n_slots && slots[filled].line == s->len) {
			CK(fill_slot(m, s, slots[filled].dst));
			filled++;
			if (n_filled)
				*n_filled = filled;
		}
	}
	return 0;
}

int eng_decode(eng_model *m, eng_seq *s, int32_t id, float *logits)
{
	if (s->len < 0 || s->len + 1 > m->lay.window || !logits)
		return MOOR_ERANGE;
	return forward_chunk(m, s, &id, 1, logits, ENG_LOGITS_LAST, 1);
}
