/* mktiny.c: moor-mktiny, the tiny Qwen3.5 test model.
 *
 *   moor-mktiny OUTDIR [--tokenizer-dir DIR]
 *
 * Writes OUTDIR/config.json (model_type qwen3_5_text, 8 layers with full
 * attention at 3 and 7, H 256, real Qwen3 vocabulary size 151669) and
 * OUTDIR/model.safetensors with every tensor of SPEC §2 for that config
 * (text-only names under `model.`, tied embeddings so no lm_head.weight).
 * Weights are bf16, except A_log, dt_bias and linear_attn.norm.weight, which
 * are f32 so that loaders meet the mixed-dtype case published checkpoints
 * have. With --tokenizer-dir, tokenizer.json and tokenizer_config.json are
 * copied from DIR.
 *
 * Reproducibility: the file is the same bytes on every machine. Each tensor
 * draws from its own xoshiro256** stream seeded by splitmix64 from a fixed
 * seed and the FNV-1a hash of its name (so adding a tensor changes no other).
 * Values use only exactly rounded IEEE operations (+, -, *, /, sqrt and
 * conversions) in double: an approximately normal value is the sum of four
 * uniforms, centred and scaled to unit variance; no libm transcendental is
 * called. Rounding to bf16 is integer code (moor_f32_to_bf16).
 *
 * Scales: matrices N(0, 1/sqrt(fan_in)) (std; out_proj, o_proj and
 * down_proj, which write into the residual stream, 3x that), embedding
 * N(0, 1), the
 * zero-centred RMSNorm weights 0.1 N (the model applies 1 + w), the GDN
 * output norm 1 + 0.1 N (plain weight), A_log U(-1, 1), dt_bias 0.5 N,
 * conv1d.weight 0.5 N.
 *
 * The end token's bias. A model with random weights never picks its end
 * token, so every reply ran to max_tokens and an agent client waited (an
 * opencode title request generated 18,785 tokens). The row of <|im_end|>
 * (MKTINY_EOS, the end of a chat turn) in the tied embedding is drawn as
 * every row is and then scaled by MKTINY_EOS_GAIN (2.25, exact in binary):
 * its logit, the final hidden state's dot product with that row, then
 * spreads 2.25 times as wide as any other token's and beats the best of
 * the others at about one step in 40 (a gain of 2: one in 60 to 75; 2.5:
 * one in 25), a hazard about constant along the answer. Measured on 40
 * one-turn chat prompts (qwen3 template) up to 400 tokens: greedy, 39
 * ended, median 25 tokens; sampled at temperature 1, all 40, median 36,
 * mean 58; in each, one ended at its first token. The few answers that
 * end in a handful of tokens are the price of a length the model cannot
 * see; the text stays noise. No other value changes: the scale is
 * applied after the draw, and every other row draws the same numbers.
 *
 * Every file is written atomically (safetensors_write.h). The test
 * tests/loader/test_mktiny_reproducible.c #includes this file with
 * MKTINY_NO_MAIN to call mktiny_write().
 */
#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "moor.h"
#include "ops.h"
#include "safetensors_write.h"

/* Excess precision (x87) would change the bits. */
#if !defined(FLT_EVAL_METHOD) || FLT_EVAL_METHOD != 0
#error "mktiny needs FLT_EVAL_METHOD == 0 for reproducible values"
#endif

#define MKTINY_SEED 0x6d6f6f722d74696eull /* "moor-tin" */
#define MKTINY_BOS 151643
#define MKTINY_EOS 151645
#define MKTINY_EOS_GAIN 2.25 /* the end token's embedding row, see above */

/* ---- the configuration --------------------------------------------------- */

static void mktiny_config(qwen35_config *c)
{
	memset(c, 0, sizeof *c);
	c->vocab = 151669;
	c->hidden = 256;
	c->layers = 8;
	c->inter = 768;
	for (int i = 0; i < c->layers; i++)
		c->is_full[i] = i == 3 || i == 7;
	c->n_heads = 4;
	c->n_kv_heads = 2;
	c->head_dim = 64;
	c->lin_k_heads = 2;
	c->lin_v_heads = 4;
	c->lin_k_dim = 64;
	c->lin_v_dim = 64;
	c->conv_kernel = 4;
	c->eps = 1e-6f;
	c->rope_theta = 1e7f;
	c->partial_rotary = 0.25f;
	c->rot_dim = 16;
	c->tie = 1;
	c->max_pos = 262144;
	c->dtype = KERN_BF16;
	c->eos_id = MKTINY_EOS;
	snprintf(c->model_type, sizeof c->model_type, "qwen3_5_text");
}

/* config.json text for c (malloc'd, NUL-terminated), or NULL. */
static char *mktiny_config_json(const qwen35_config *c)
{
	json_t *o = json_object(), *lt = json_array(), *rope = json_object();
	json_t *arch = json_array();
	if (!o || !lt || !rope || !arch)
		goto fail;
	for (int i = 0; i < c->layers; i++)
		json_array_append_new(
		    lt, json_string(c->is_full[i] ? "full_attention"
						  : "linear_attention"));
	json_array_append_new(arch, json_string("Qwen3_5ForCausalLM"));
	json_object_set_new(rope, "rope_type", json_string("default"));
	json_object_set_new(rope, "rope_theta",
			    json_integer((json_int_t)c->rope_theta));
	json_object_set_new(rope, "partial_rotary_factor",
			    json_real(c->partial_rotary));
	int bad = 0;
#define SETI(k, v) bad |= json_object_set_new(o, k, json_integer(v))
	bad |= json_object_set_new(o, "architectures", arch);
	bad |= json_object_set_new(o, "model_type", json_string(c->model_type));
	SETI("vocab_size", c->vocab);
	SETI("hidden_size", c->hidden);
	SETI("num_hidden_layers", c->layers);
	bad |= json_object_set_new(o, "layer_types", lt);
	SETI("intermediate_size", c->inter);
	SETI("num_attention_heads", c->n_heads);
	SETI("num_key_value_heads", c->n_kv_heads);
	SETI("head_dim", c->head_dim);
	SETI("linear_num_key_heads", c->lin_k_heads);
	SETI("linear_num_value_heads", c->lin_v_heads);
	SETI("linear_key_head_dim", c->lin_k_dim);
	SETI("linear_value_head_dim", c->lin_v_dim);
	SETI("linear_conv_kernel_dim", c->conv_kernel);
	bad |= json_object_set_new(o, "hidden_act", json_string("silu"));
	/* 1e-6 as written by Python, not the float's 17 digits. */
	bad |= json_object_set_new(o, "rms_norm_eps", json_real(1e-6));
	bad |= json_object_set_new(o, "rope_parameters", rope);
	bad |=
	    json_object_set_new(o, "tie_word_embeddings", json_boolean(c->tie));
	SETI("max_position_embeddings", c->max_pos);
	bad |= json_object_set_new(o, "dtype", json_string("bfloat16"));
	SETI("bos_token_id", MKTINY_BOS);
	SETI("eos_token_id", c->eos_id);
#undef SETI
	if (bad) {
		json_decref(o);
		return NULL;
	}
	char *s = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER |
				    JSON_REAL_PRECISION(15));
	json_decref(o);
	return s;
fail:
	json_decref(o);
	json_decref(lt);
	json_decref(rope);
	json_decref(arch);
	return NULL;
}

/* ---- the generator ------------------------------------------------------- */

struct rng {
	uint64_t s[4];
};

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static uint64_t xoshiro256ss(struct rng *r)
{
	uint64_t *s = r->s;
	uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return out;
}

static void rng_seed(struct rng *r, const char *name)
{
	uint64_t h = 14695981039346656037ull;
	for (const char *p = name; *p; p++) {
		h ^= (uint8_t)*p;
		h *= 1099511628211ull;
	}
	uint64_t x = MKTINY_SEED ^ h;
	for (int i = 0; i < 4; i++)
		r->s[i] = splitmix64(&x);
}

/* [0, 1), a multiple of 2^-53: exact. */
static double unif(struct rng *r)
{
	return (double)(xoshiro256ss(r) >> 11) * 0x1p-53;
}

/* Mean 0, variance 1: four uniforms sum to mean 2, variance 1/3. */
static double normal4(struct rng *r)
{
	double s = unif(r) + unif(r) + unif(r) + unif(r);
	return (s - 2.0) * 1.7320508075688772; /* sqrt(3) */
}

enum init_kind { INIT_NORMAL, INIT_UNIFORM };

struct tspec {
	char name[96];
	int dtype;
	int ndim;
	int64_t shape[3];
	enum init_kind kind;
	double a, b; /* normal: mean a, std b; uniform: [a, b) */
	double row_gain;  /* 0: none; else row gain_row is scaled by it */
	int64_t gain_row; /* a row of a 2-D tensor */
};

#define MKTINY_MAX_TENSORS 1024

static int64_t tspec_numel(const struct tspec *t)
{
	int64_t n = 1;
	for (int i = 0; i < t->ndim; i++)
		n *= t->shape[i];
	return n;
}

/* The tensors of SPEC §2 for c, text-only names; returns their count. */
static size_t mktiny_tensors(const qwen35_config *c, struct tspec *ts)
{
	size_t n = 0;
	const int64_t H = c->hidden, I = c->inter, D = c->head_dim;
	const int64_t Hq = c->n_heads, Hkv = c->n_kv_heads, Hv = c->lin_v_heads;
	const int64_t kd = qwen35_key_dim(c), vd = qwen35_value_dim(c);
	const int64_t cd = qwen35_conv_dim(c), Kc = c->conv_kernel;
	const int64_t dv = c->lin_v_dim;
#define T(nm_fmt, nm_arg, dt, nd, s0, s1, s2, kd_, a_, b_)                     \
	do {                                                                   \
		MOOR_ASSERT(n < MKTINY_MAX_TENSORS);                           \
		struct tspec *t = &ts[n++];                                    \
		snprintf(t->name, sizeof t->name, nm_fmt, nm_arg);             \
		t->dtype = dt;                                                 \
		t->ndim = nd;                                                  \
		t->shape[0] = s0;                                              \
		t->shape[1] = s1;                                              \
		t->shape[2] = s2;                                              \
		t->kind = kd_;                                                 \
		t->a = a_;                                                     \
		t->b = b_;                                                     \
	} while (0)
/* A matrix [o, i] ~ N(0, 1/sqrt(i)); a zero-centred norm [d] ~ 0.1 N. */
#define MAT(fmt, arg, o, i)                                                    \
	T(fmt, arg, KERN_BF16, 2, o, i, 0, INIT_NORMAL, 0.0,                   \
	  1.0 / sqrt((double)(i)))
/* A matrix that writes into the residual stream, with gain 3: at plain
 * scale the stream stays the current token's embedding and the tied head
 * answers the token it was fed, so greedy text would repeat one token. */
#define MATG(fmt, arg, o, i)                                                   \
	T(fmt, arg, KERN_BF16, 2, o, i, 0, INIT_NORMAL, 0.0,                   \
	  3.0 / sqrt((double)(i)))
#define NORM(fmt, arg, d)                                                      \
	T(fmt, arg, KERN_BF16, 1, d, 0, 0, INIT_NORMAL, 0.0, 0.1)
	T("model.embed_tokens.weight%s", "", KERN_BF16, 2, c->vocab, H, 0,
	  INIT_NORMAL, 0.0, 1.0);
	ts[n - 1].row_gain = MKTINY_EOS_GAIN;
	ts[n - 1].gain_row = c->eos_id;
	NORM("model.norm.weight%s", "", H);
	for (int l = 0; l < c->layers; l++) {
		NORM("model.layers.%d.input_layernorm.weight", l, H);
		NORM("model.layers.%d.post_attention_layernorm.weight", l, H);
		MAT("model.layers.%d.mlp.gate_proj.weight", l, I, H);
		MAT("model.layers.%d.mlp.up_proj.weight", l, I, H);
		MATG("model.layers.%d.mlp.down_proj.weight", l, H, I);
		if (c->is_full[l]) {
			MAT("model.layers.%d.self_attn.q_proj.weight", l,
			    Hq * D * 2, H);
			MAT("model.layers.%d.self_attn.k_proj.weight", l,
			    Hkv * D, H);
			MAT("model.layers.%d.self_attn.v_proj.weight", l,
			    Hkv * D, H);
			MATG("model.layers.%d.self_attn.o_proj.weight", l, H,
			     Hq * D);
			NORM("model.layers.%d.self_attn.q_norm.weight", l, D);
			NORM("model.layers.%d.self_attn.k_norm.weight", l, D);
		} else {
			MAT("model.layers.%d.linear_attn.in_proj_qkv.weight", l,
			    cd, H);
			MAT("model.layers.%d.linear_attn.in_proj_z.weight", l,
			    vd, H);
			MAT("model.layers.%d.linear_attn.in_proj_b.weight", l,
			    Hv, H);
			MAT("model.layers.%d.linear_attn.in_proj_a.weight", l,
			    Hv, H);
			T("model.layers.%d.linear_attn.conv1d.weight", l,
			  KERN_BF16, 3, cd, 1, Kc, INIT_NORMAL, 0.0, 0.5);
			T("model.layers.%d.linear_attn.dt_bias", l, KERN_F32, 1,
			  Hv, 0, 0, INIT_NORMAL, 0.0, 0.5);
			T("model.layers.%d.linear_attn.A_log", l, KERN_F32, 1,
			  Hv, 0, 0, INIT_UNIFORM, -1.0, 1.0);
			T("model.layers.%d.linear_attn.norm.weight", l,
			  KERN_F32, 1, dv, 0, 0, INIT_NORMAL, 1.0, 0.1);
			MATG("model.layers.%d.linear_attn.out_proj.weight", l,
			     H, vd);
		}
	}
	(void)kd;
#undef NORM
#undef MAT
#undef MATG
#undef T
	return n;
}

static void fill(const struct tspec *t, void *buf)
{
	struct rng r;
	rng_seed(&r, t->name);
	int64_t n = tspec_numel(t);
	int64_t cols = t->ndim == 2 ? t->shape[1] : n;
	for (int64_t i = 0; i < n; i++) {
		double v = t->kind == INIT_NORMAL
			       ? t->a + t->b * normal4(&r)
			       : t->a + (t->b - t->a) * unif(&r);
		if (t->row_gain != 0 && i / cols == t->gain_row)
			v *= t->row_gain;
		float f = (float)v;
		if (t->dtype == KERN_F32)
			memcpy((char *)buf + 4 * i, &f, 4);
		else {
			uint16_t h = moor_f32_to_bf16(f);
			memcpy((char *)buf + 2 * i, &h, 2);
		}
	}
}

static int copy_file(const char *src, const char *dst, char *err)
{
	FILE *f = fopen(src, "rb");
	if (!f) {
		int e = errno;
		moor_errf(err, "%s: %s", src, strerror(e));
		return -e;
	}
	size_t cap = 1 << 20, len = 0;
	char *buf = malloc(cap);
	int rc = 0;
	while (buf) {
		size_t r = fread(buf + len, 1, cap - len, f);
		len += r;
		if (len < cap)
			break;
		char *nb = realloc(buf, cap *= 2);
		if (!nb) {
			free(buf);
			buf = NULL;
		} else {
			buf = nb;
		}
	}
	if (!buf) {
		rc = -ENOMEM;
		moor_errf(err, "%s: out of memory", src);
	} else if (ferror(f)) {
		rc = -EIO;
		moor_errf(err, "%s: read error", src);
	}
	fclose(f);
	if (!rc)
		rc = st_write_file(dst, buf, len, err);
	free(buf);
	return rc;
}

/* Writes the tiny model into outdir (created if absent); tokdir may be
 * NULL. Returns 0 or a negative code with err. */
static int mktiny_write(const char *outdir, const char *tokdir, char *err)
{
	char path[4096];
	static const char *const tok[] = {"tokenizer.json",
					  "tokenizer_config.json"};
	/* Fail before writing anything if the tokenizer is not there. */
	for (size_t i = 0; tokdir && i < 2; i++) {
		snprintf(path, sizeof path, "%s/%s", tokdir, tok[i]);
		if (access(path, R_OK) < 0) {
			int e = errno;
			moor_errf(err, "%s: %s", path, strerror(e));
			return -e;
		}
	}
	if (mkdir(outdir, 0755) < 0 && errno != EEXIST) {
		int e = errno;
		moor_errf(err, "%s: mkdir: %s", outdir, strerror(e));
		return -e;
	}
	qwen35_config c;
	mktiny_config(&c);
	int rc = 0;
	struct tspec *ts = calloc(MKTINY_MAX_TENSORS, sizeof *ts);
	st_entry *es = calloc(MKTINY_MAX_TENSORS, sizeof *es);
	char *js = mktiny_config_json(&c);
	size_t n = 0;
	if (!ts || !es || !js) {
		moor_errf(err, "%s: out of memory", outdir);
		rc = -ENOMEM;
		goto out;
	}
	n = mktiny_tensors(&c, ts);
	for (size_t i = 0; i < n; i++) {
		size_t nb =
		    (size_t)tspec_numel(&ts[i]) * kern_dtype_size(ts[i].dtype);
		void *buf = malloc(nb);
		if (!buf) {
			moor_errf(err, "%s: out of memory", outdir);
			rc = -ENOMEM;
			goto out;
		}
		fill(&ts[i], buf);
		es[i] = (st_entry){ts[i].name, ts[i].dtype, NULL,
				   ts[i].ndim, ts[i].shape, buf};
	}
	snprintf(path, sizeof path, "%s/config.json", outdir);
	size_t jl = strlen(js);
	js[jl] = '\n'; /* replaces the NUL: the file ends with a newline */
	rc = st_write_file(path, js, jl + 1, err);
	js[jl] = 0;
	if (rc)
		goto out;
	snprintf(path, sizeof path, "%s/model.safetensors", outdir);
	if ((rc = st_write(path, es, n, err)))
		goto out;
	if (tokdir) {
		for (size_t i = 0; i < 2 && !rc; i++) {
			char src[4096];
			snprintf(src, sizeof src, "%s/%s", tokdir, tok[i]);
			snprintf(path, sizeof path, "%s/%s", outdir, tok[i]);
			rc = copy_file(src, path, err);
		}
	}
out:
	for (size_t i = 0; es && i < n; i++)
		free((void *)es[i].data);
	free(es);
	free(ts);
	free(js);
	return rc;
}

#ifndef MKTINY_NO_MAIN
static void usage(void)
{
	fprintf(stderr, "usage: moor-mktiny OUTDIR [--tokenizer-dir DIR]\n");
}

int main(int argc, char **argv)
{
	const char *out = NULL, *tok = NULL;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--tokenizer-dir") && i + 1 < argc)
			tok = argv[++i];
		else if (!strncmp(argv[i], "--tokenizer-dir=", 16))
			tok = argv[i] + 16;
		else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			usage();
			return 0;
		} else if (argv[i][0] == '-' || out) {
			usage();
			return 2;
		} else
			out = argv[i];
	}
	if (!out) {
		usage();
		return 2;
	}
	moor_log_set_name("moor-mktiny");
	char err[MOOR_ERRLEN] = "";
	double t0 = moor_now();
	int rc = mktiny_write(out, tok, err);
	if (rc) {
		moor_err("%s", err);
		return 1;
	}
	moor_info("wrote %s in %.2f s", out, moor_now() - t0);
	return 0;
}
#endif
