/* config.c: reads and validates the config.json of a Qwen3.5 text model
 * (the rules are in config.h). */
#include "config.h"

#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "moor.h"
#include "ops.h"

/* Sanity bounds: far above any published model, low enough that every
 * derived size below (Hq·D·2, conv_dim, V·H) fits its type. */
#define DIM_MAX (1 << 20)   /* hidden, intermediate */
#define VOCAB_MAX (1 << 24) /* vocabulary */
#define HEAD_MAX 4096	    /* head counts and head dims */
#define KC_MAX 64	    /* conv kernel */

#define REQUIRED 1
#define OPTIONAL 0

struct rd {
	const char *path; /* DIR/config.json, for messages */
	char *err;
};

/* An integer field of o in [lo, hi]; absent: def, or MOOR_EMISSING when
 * required. */
static int get_int(const struct rd *r, json_t *o, const char *key, int req,
		   int def, int lo, int hi, int *out)
{
	json_t *v = json_object_get(o, key);
	if (!v || json_is_null(v)) {
		if (req) {
			moor_errf(r->err, "%s: %s is missing", r->path, key);
			return MOOR_EMISSING;
		}
		*out = def;
		return 0;
	}
	if (!json_is_integer(v)) {
		moor_errf(r->err, "%s: %s is not an integer", r->path, key);
		return MOOR_EFORMAT;
	}
	json_int_t x = json_integer_value(v);
	if (x < lo || x > hi) {
		moor_errf(r->err, "%s: %s = %lld is out of range [%d, %d]",
			  r->path, key, (long long)x, lo, hi);
		return MOOR_ERANGE;
	}
	*out = (int)x;
	return 0;
}

/* A number field (integer or real) of o, > 0; absent: def. */
static int get_pos_num(const struct rd *r, json_t *o, const char *key,
		       double def, double *out)
{
	json_t *v = json_object_get(o, key);
	if (!v || json_is_null(v)) {
		*out = def;
		return 0;
	}
	if (!json_is_number(v)) {
		moor_errf(r->err, "%s: %s is not a number", r->path, key);
		return MOOR_EFORMAT;
	}
	double x = json_number_value(v);
	if (!(x > 0) || x > 1e30) {
		moor_errf(r->err, "%s: %s = %g is out of range", r->path, key,
			  x);
		return MOOR_ERANGE;
	}
	*out = x;
	return 0;
}

/* A boolean field; absent: def. */
static int get_bool(const struct rd *r, json_t *o, const char *key, int def,
		    int *out)
{
	json_t *v = json_object_get(o, key);
	if (!v || json_is_null(v)) {
		*out = def;
		return 0;
	}
	if (!json_is_boolean(v)) {
		moor_errf(r->err, "%s: %s is not a boolean", r->path, key);
		return MOOR_EFORMAT;
	}
	*out = json_is_true(v);
	return 0;
}

/* text_config's value of key if it has one, else the top level's. */
static json_t *either(json_t *tc, json_t *top, const char *key)
{
	json_t *v = json_object_get(tc, key);
	if (v && !json_is_null(v))
		return v;
	return json_object_get(top, key);
}

static int read_rope(const struct rd *r, json_t *tc, qwen35_config *c)
{
	json_t *rp = json_object_get(tc, "rope_scaling");
	if (!json_is_object(rp))
		rp = json_object_get(tc, "rope_parameters");
	if (rp && !json_is_null(rp) && !json_is_object(rp)) {
		moor_errf(r->err, "%s: rope_parameters is not an object",
			  r->path);
		return MOOR_EFORMAT;
	}
	if (json_is_object(rp)) {
		json_t *ty = json_object_get(rp, "rope_type");
		if (!ty)
			ty = json_object_get(rp, "type");
		if (ty && !json_is_null(ty)) {
			const char *s = json_string_value(ty);
			if (!s) {
				moor_errf(r->err,
					  "%s: rope_type is not a string",
					  r->path);
				return MOOR_EFORMAT;
			}
			if (strcmp(s, "default") && strcmp(s, "mrope")) {
				moor_errf(r->err,
					  "%s: rope_type \"%s\" is not "
					  "supported (default, mrope)",
					  r->path, s);
				return MOOR_EUNSUP;
			}
		}
	}
	double theta, prf;
	json_t *src =
	    json_is_object(rp) && json_object_get(rp, "rope_theta") ? rp : tc;
	int rc = get_pos_num(r, src, "rope_theta", 10000.0, &theta);
	if (rc)
		return rc;
	src = json_is_object(rp) && json_object_get(rp, "partial_rotary_factor")
		  ? rp
		  : tc;
	if ((rc = get_pos_num(r, src, "partial_rotary_factor", 0.25, &prf)))
		return rc;
	if (prf > 1) {
		moor_errf(r->err, "%s: partial_rotary_factor %g exceeds 1",
			  r->path, prf);
		return MOOR_ERANGE;
	}
	c->rope_theta = (float)theta;
	c->partial_rotary = (float)prf;
	/* In double, as transformers computes int(head_dim * factor). */
	c->rot_dim = (int)(prf * (double)c->head_dim);
	if (c->rot_dim <= 0 || c->rot_dim % 2 || c->rot_dim > c->head_dim) {
		moor_errf(r->err,
			  "%s: rotary dim %d (partial_rotary_factor %g x "
			  "head_dim %d) must be even and in [2, head_dim]",
			  r->path, c->rot_dim, prf, c->head_dim);
		return MOOR_ERANGE;
	}
	return 0;
}

static int read_layer_types(const struct rd *r, json_t *tc, qwen35_config *c)
{
	json_t *lt = json_object_get(tc, "layer_types");
	if (!lt || json_is_null(lt)) {
		int iv;
		int rc = get_int(r, tc, "full_attention_interval", OPTIONAL, 4,
				 1, QWEN35_MAX_LAYERS, &iv);
		if (rc)
			return rc;
		for (int i = 0; i < c->layers; i++)
			c->is_full[i] = (i + 1) % iv == 0;
		return 0;
	}
	if (!json_is_array(lt)) {
		moor_errf(r->err, "%s: layer_types is not an array", r->path);
		return MOOR_EFORMAT;
	}
	if (json_array_size(lt) != (size_t)c->layers) {
		moor_errf(r->err,
			  "%s: layer_types has %zu entries, "
			  "num_hidden_layers is %d",
			  r->path, json_array_size(lt), c->layers);
		return MOOR_ERANGE;
	}
	for (int i = 0; i < c->layers; i++) {
		const char *s =
		    json_string_value(json_array_get(lt, (size_t)i));
		if (s && !strcmp(s, "full_attention")) {
			c->is_full[i] = 1;
		} else if (s && !strcmp(s, "linear_attention")) {
			c->is_full[i] = 0;
		} else {
			moor_errf(r->err,
				  "%s: layer_types[%d] is not "
				  "\"full_attention\" or \"linear_attention\"",
				  r->path, i);
			return s ? MOOR_EUNSUP : MOOR_EFORMAT;
		}
	}
	return 0;
}

static int read_dtype(const struct rd *r, json_t *tc, json_t *top,
		      qwen35_config *c)
{
	const char *key = "dtype";
	json_t *v = either(tc, top, key);
	if (!v || json_is_null(v)) {
		key = "torch_dtype";
		v = either(tc, top, key);
	}
	if (!v || json_is_null(v)) {
		c->dtype = KERN_BF16;
		return 0;
	}
	const char *s = json_string_value(v);
	if (!s) {
		moor_errf(r->err, "%s: %s is not a string", r->path, key);
		return MOOR_EFORMAT;
	}
	if (!strcmp(s, "bfloat16"))
		c->dtype = KERN_BF16;
	else if (!strcmp(s, "float16"))
		c->dtype = KERN_F16;
	else if (!strcmp(s, "float32"))
		c->dtype = KERN_F32;
	else {
		moor_errf(r->err,
			  "%s: %s \"%s\" is not supported (bfloat16, "
			  "float16, float32)",
			  r->path, key, s);
		return MOOR_EUNSUP;
	}
	return 0;
}

static int read_eos(const struct rd *r, json_t *tc, json_t *top,
		    qwen35_config *c)
{
	json_t *v = either(tc, top, "eos_token_id");
	c->eos_id = -1;
	if (json_is_array(v))
		v = json_array_size(v) ? json_array_get(v, 0) : NULL;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < 0 ||
	    json_integer_value(v) >= c->vocab) {
		moor_errf(r->err,
			  "%s: eos_token_id is not a token id below "
			  "vocab_size %d",
			  r->path, c->vocab);
		return MOOR_ERANGE;
	}
	c->eos_id = (int)json_integer_value(v);
	return 0;
}

static int refuse_feature(const struct rd *r, json_t *tc, const char *key,
			  int def, int supported)
{
	int v;
	int rc = get_bool(r, tc, key, def, &v);
	if (rc)
		return rc;
	if (v != supported) {
		moor_errf(r->err, "%s: %s = %s is not supported", r->path, key,
			  v ? "true" : "false");
		return MOOR_EUNSUP;
	}
	return 0;
}

static int parse(const struct rd *r, json_t *top, qwen35_config *c)
{
	if (!json_is_object(top)) {
		moor_errf(r->err, "%s: not a JSON object", r->path);
		return MOOR_EFORMAT;
	}
	const char *mt = json_string_value(json_object_get(top, "model_type"));
	if (!mt) {
		moor_errf(r->err, "%s: model_type is missing", r->path);
		return MOOR_EMISSING;
	}
	json_t *tc;
	if (!strcmp(mt, "qwen3_5")) {
		tc = json_object_get(top, "text_config");
		if (!json_is_object(tc)) {
			moor_errf(r->err,
				  "%s: model_type \"qwen3_5\" needs a "
				  "text_config object",
				  r->path);
			return MOOR_EMISSING;
		}
	} else if (!strcmp(mt, "qwen3_5_text")) {
		tc = top;
	} else {
		moor_errf(r->err,
			  "%s: model_type \"%s\" is not supported (qwen3_5, "
			  "qwen3_5_text)",
			  r->path, mt);
		return MOOR_EUNSUP;
	}
	snprintf(c->model_type, sizeof c->model_type, "%s", mt);

	static const struct {
		const char *key;
		int req, def, hi;
		size_t off;
	} ints[] = {
#define F(k, req, def, hi, field)                                              \
	{k, req, def, hi, offsetof(qwen35_config, field)}
	    F("vocab_size", REQUIRED, 0, VOCAB_MAX, vocab),
	    F("hidden_size", REQUIRED, 0, DIM_MAX, hidden),
	    F("num_hidden_layers", REQUIRED, 0, QWEN35_MAX_LAYERS, layers),
	    F("intermediate_size", REQUIRED, 0, DIM_MAX, inter),
	    F("num_attention_heads", REQUIRED, 0, HEAD_MAX, n_heads),
	    F("num_key_value_heads", REQUIRED, 0, HEAD_MAX, n_kv_heads),
	    F("head_dim", OPTIONAL, 256, HEAD_MAX, head_dim),
	    F("linear_num_key_heads", OPTIONAL, 16, HEAD_MAX, lin_k_heads),
	    F("linear_num_value_heads", OPTIONAL, 32, HEAD_MAX, lin_v_heads),
	    F("linear_key_head_dim", OPTIONAL, 128, HEAD_MAX, lin_k_dim),
	    F("linear_value_head_dim", OPTIONAL, 128, HEAD_MAX, lin_v_dim),
	    F("linear_conv_kernel_dim", OPTIONAL, 4, KC_MAX, conv_kernel),
	    F("max_position_embeddings", OPTIONAL, 32768, INT_MAX, max_pos),
#undef F
	};
	int rc;
	for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
		int *dst = (int *)((char *)c + ints[i].off);
		if ((rc = get_int(r, tc, ints[i].key, ints[i].req, ints[i].def,
				  1, ints[i].hi, dst)))
			return rc;
	}
	if (c->n_heads % c->n_kv_heads) {
		moor_errf(r->err,
			  "%s: num_attention_heads %d is not a multiple of "
			  "num_key_value_heads %d",
			  r->path, c->n_heads, c->n_kv_heads);
		return MOOR_ERANGE;
	}
	if (c->lin_v_heads % c->lin_k_heads) {
		moor_errf(r->err,
			  "%s: linear_num_value_heads %d is not a multiple "
			  "of linear_num_key_heads %d",
			  r->path, c->lin_v_heads, c->lin_k_heads);
		return MOOR_ERANGE;
	}
	double eps;
	if ((rc = get_pos_num(r, tc, "rms_norm_eps", 1e-6, &eps)))
		return rc;
	c->eps = (float)eps;
	json_t *tie = json_object_get(tc, "tie_word_embeddings");
	if ((rc = get_bool(r, tie && !json_is_null(tie) ? tc : top,
			   "tie_word_embeddings", 0, &c->tie)))
		return rc;
	if ((rc = refuse_feature(r, tc, "attention_bias", 0, 0)) ||
	    (rc = refuse_feature(r, tc, "attn_output_gate", 1, 1)) ||
	    (rc = refuse_feature(r, tc, "layer_scale", 0, 0)))
		return rc;
	if ((rc = read_rope(r, tc, c)) || (rc = read_layer_types(r, tc, c)) ||
	    (rc = read_dtype(r, tc, top, c)) || (rc = read_eos(r, tc, top, c)))
		return rc;
	return 0;
}

int qwen35_config_load(const char *dir, qwen35_config *cfg, char *err)
{
	memset(cfg, 0, sizeof *cfg);
	char path[4096];
	if ((size_t)snprintf(path, sizeof path, "%s/config.json", dir) >=
	    sizeof path) {
		moor_errf(err, "%s: path too long", dir);
		return -ENAMETOOLONG;
	}
	struct rd r = {path, err};
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		moor_errf(err, "%s: %s", path, strerror(e));
		return -e;
	}
	json_error_t je;
	json_t *top = json_loadfd(fd, JSON_REJECT_DUPLICATES, &je);
	close(fd);
	if (!top) {
		moor_errf(err, "%s: malformed JSON: %s (line %d, column %d)",
			  path, je.text, je.line, je.column);
		return MOOR_EFORMAT;
	}
	int rc = parse(&r, top, cfg);
	json_decref(top);
	if (rc)
		memset(cfg, 0, sizeof *cfg);
	return rc;
}
