/* config.h: the config.json of a Qwen3.5 dense text model (SPEC §1).
 *
 * Two layouts are read:
 *   - model_type "qwen3_5" (the published vision-language wrapper): the text
 *     fields live under "text_config";
 *   - model_type "qwen3_5_text" (a text-only checkpoint): the fields are at
 *     the top level.
 * Fields that may sit at either level (tie_word_embeddings, dtype /
 * torch_dtype, eos_token_id) are taken from text_config when it has them,
 * else from the top level.
 *
 * Required: vocab_size, hidden_size, num_hidden_layers, intermediate_size,
 * num_attention_heads, num_key_value_heads. The rest default as in
 * transformers' Qwen3_5TextConfig: head_dim 256, linear_num_key_heads 16,
 * linear_num_value_heads 32, linear_key_head_dim 128, linear_value_head_dim
 * 128, linear_conv_kernel_dim 4, rms_norm_eps 1e-6, max_position_embeddings
 * 32768, tie_word_embeddings false, full_attention_interval 4 (used only
 * without layer_types), rope_theta 10000, partial_rotary_factor 0.25.
 *
 * RoPE: the parameters come from "rope_scaling" if it is an object, else
 * "rope_parameters" (this precedence is transformers'), with "rope_theta" and
 * "partial_rotary_factor" falling back to top-level keys of those names.
 * rope_type (or "type") must be absent, "default" or "mrope": for text the
 * interleaved MRoPE is plain RoPE (SPEC §6.3); any scaled RoPE is
 * MOOR_EUNSUP. rot_dim = (int)(partial_rotary * head_dim), as transformers
 * truncates it.
 *
 * Refused as unsupported (MOOR_EUNSUP): attention_bias true,
 * attn_output_gate false, layer_scale true (no published checkpoint has them;
 * the forward pass does not implement them).
 *
 * Errors: -ENOENT (or another -errno) naming the path when config.json cannot
 * be opened; MOOR_EFORMAT for malformed JSON (with jansson's line and
 * column) or a field of the wrong JSON type; MOOR_EMISSING for an absent
 * required field; MOOR_EUNSUP for another model_type or feature;
 * MOOR_ERANGE for inconsistent or out-of-range values. err (MOOR_ERRLEN,
 * may be NULL) names DIR/config.json and the field. On failure *cfg is
 * zeroed.
 */
#ifndef ENG_CONFIG_H
#define ENG_CONFIG_H

#include <stdint.h>

#define QWEN35_MAX_LAYERS 256

typedef struct qwen35_config {
	int vocab, hidden, layers, inter;   /* V, H, L, I */
	uint8_t is_full[QWEN35_MAX_LAYERS]; /* [L]: 1 full attention, 0 GDN */
	int n_heads, n_kv_heads, head_dim;  /* Hq, Hkv, D */
	int lin_k_heads, lin_v_heads, lin_k_dim, lin_v_dim, conv_kernel;
	/* Hk, Hv, dk, dv, Kc */
	float eps, rope_theta, partial_rotary;
	int rot_dim; /* partial_rotary * head_dim, even, <= D */
	int tie;     /* lm_head is embed_tokens */
	int max_pos; /* max_position_embeddings */
	int dtype;   /* KERN_BF16 / KERN_F16 / KERN_F32 (default bf16) */
	int eos_id;  /* the first eos_token_id, or -1 */
	char model_type[64]; /* the top-level model_type */
} qwen35_config;

/* Reads and validates DIR/config.json into *cfg. */
int qwen35_config_load(const char *dir, qwen35_config *cfg, char *err);

/* Derived sizes (SPEC §1). */
static inline int qwen35_key_dim(const qwen35_config *c)
{
	return c->lin_k_heads * c->lin_k_dim;
}
static inline int qwen35_value_dim(const qwen35_config *c)
{
	return c->lin_v_heads * c->lin_v_dim;
}
static inline int qwen35_conv_dim(const qwen35_config *c)
{
	return 2 * qwen35_key_dim(c) + qwen35_value_dim(c);
}

#endif
