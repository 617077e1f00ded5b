/* test_config_layouts: qwen35_config_load() reads both config layouts — the
 * published "qwen3_5" wrapper (fields under text_config, text_config's
 * tie_word_embeddings winning over the top level) and the bare
 * "qwen3_5_text" — with RoPE from rope_parameters, from rope_scaling, or from
 * the older top-level keys; layer kinds from layer_types or from
 * full_attention_interval; eos_token_id as an int or an array; and the
 * transformers defaults where fields are absent. */
#include <math.h>

#include "loader_test.h"

#include "config.h"
#include "ops.h"

/* A Qwen3.5-27B config.json as published (abridged: vision_config cut). */
static const char *cfg_27b =
    "{\n"
    "  \"architectures\": [\"Qwen3_5ForConditionalGeneration\"],\n"
    "  \"image_token_id\": 248056,\n"
    "  \"model_type\": \"qwen3_5\",\n"
    "  \"text_config\": {\n"
    "    \"attention_bias\": false,\n"
    "    \"attention_dropout\": 0.0,\n"
    "    \"attn_output_gate\": true,\n"
    "    \"dtype\": \"bfloat16\",\n"
    "    \"eos_token_id\": 248044,\n"
    "    \"full_attention_interval\": 4,\n"
    "    \"head_dim\": 256,\n"
    "    \"hidden_act\": \"silu\",\n"
    "    \"hidden_size\": 5120,\n"
    "    \"initializer_range\": 0.02,\n"
    "    \"intermediate_size\": 17408,\n"
    "    \"layer_types\": [%s],\n"
    "    \"linear_conv_kernel_dim\": 4,\n"
    "    \"linear_key_head_dim\": 128,\n"
    "    \"linear_num_key_heads\": 16,\n"
    "    \"linear_num_value_heads\": 48,\n"
    "    \"linear_value_head_dim\": 128,\n"
    "    \"max_position_embeddings\": 262144,\n"
    "    \"mamba_ssm_dtype\": \"float32\",\n"
    "    \"model_type\": \"qwen3_5_text\",\n"
    "    \"mtp_num_hidden_layers\": 1,\n"
    "    \"num_attention_heads\": 24,\n"
    "    \"num_hidden_layers\": 64,\n"
    "    \"num_key_value_heads\": 4,\n"
    "    \"rms_norm_eps\": 1e-06,\n"
    "    \"rope_parameters\": {\n"
    "      \"mrope_interleaved\": true,\n"
    "      \"mrope_section\": [11, 11, 10],\n"
    "      \"rope_type\": \"default\",\n"
    "      \"rope_theta\": 10000000,\n"
    "      \"partial_rotary_factor\": 0.25\n"
    "    },\n"
    "    \"tie_word_embeddings\": %s,\n"
    "    \"use_cache\": true,\n"
    "    \"vocab_size\": 248320\n"
    "  },\n"
    "  \"tie_word_embeddings\": %s,\n"
    "  \"transformers_version\": \"4.57.0.dev0\",\n"
    "  \"video_token_id\": 248057,\n"
    "  \"vision_config\": {\"depth\": 27, \"hidden_size\": 1152}\n"
    "}\n";

static void test_wrapper_27b(void)
{
	char dir[4096], err[MOOR_ERRLEN] = "", lt[64 * 24], buf[8192];
	lt_tmpdir(dir);
	size_t o = 0;
	for (int i = 0; i < 64; i++)
		o += (size_t)snprintf(
		    lt + o, sizeof lt - o, "%s\"%s\"", i ? ", " : "",
		    (i + 1) % 4 ? "linear_attention" : "full_attention");
	snprintf(buf, sizeof buf, cfg_27b, lt, "false", "true");
	lt_write_str(dir, "config.json", buf);
	qwen35_config c;
	ASSERT_RC(qwen35_config_load(dir, &c, err), 0, err);
	ASSERT(!strcmp(c.model_type, "qwen3_5"));
	ASSERT(c.vocab == 248320 && c.hidden == 5120 && c.layers == 64 &&
	       c.inter == 17408);
	ASSERT(c.n_heads == 24 && c.n_kv_heads == 4 && c.head_dim == 256);
	ASSERT(c.lin_k_heads == 16 && c.lin_v_heads == 48 &&
	       c.lin_k_dim == 128 && c.lin_v_dim == 128 && c.conv_kernel == 4);
	ASSERT(qwen35_key_dim(&c) == 2048 && qwen35_value_dim(&c) == 6144 &&
	       qwen35_conv_dim(&c) == 10240);
	ASSERT(c.eps == 1e-6f && c.rope_theta == 1e7f &&
	       c.partial_rotary == 0.25f && c.rot_dim == 64);
	ASSERT(c.tie == 0); /* text_config's false beats the top level's */
	ASSERT(c.max_pos == 262144 && c.dtype == KERN_BF16);
	ASSERT(c.eos_id == 248044);
	int full = 0;
	for (int i = 0; i < 64; i++) {
		ASSERT(c.is_full[i] == ((i + 1) % 4 == 0));
		full += c.is_full[i];
	}
	ASSERT(full == 16);

	/* Without tie in text_config the top level's applies. */
	snprintf(buf, sizeof buf, cfg_27b, lt, "null", "true");
	lt_write_str(dir, "config.json", buf);
	ASSERT_RC(qwen35_config_load(dir, &c, err), 0, err);
	ASSERT(c.tie == 1);
	lt_rmtree(dir);
}

static void test_bare_text_defaults_and_old_rope(void)
{
	char dir[4096], err[MOOR_ERRLEN] = "";
	lt_tmpdir(dir);
	/* Older keys: top-level rope_theta / partial_rotary_factor,
	 * rope_scaling null, torch_dtype, eos as an array, interval instead
	 * of layer_types; defaults for the linear_* fields. */
	lt_write_str(dir, "config.json",
		     "{\"model_type\": \"qwen3_5_text\", \"vocab_size\": 1000, "
		     "\"hidden_size\": 64, \"num_hidden_layers\": 6, "
		     "\"intermediate_size\": 128, \"num_attention_heads\": 8, "
		     "\"num_key_value_heads\": 2, \"rope_theta\": 5000000.0, "
		     "\"partial_rotary_factor\": 0.5, \"rope_scaling\": null, "
		     "\"torch_dtype\": \"float16\", \"eos_token_id\": [7, 9], "
		     "\"full_attention_interval\": 3}");
	qwen35_config c;
	ASSERT_RC(qwen35_config_load(dir, &c, err), 0, err);
	ASSERT(!strcmp(c.model_type, "qwen3_5_text"));
	ASSERT(c.head_dim == 256 && c.rot_dim == 128);
	ASSERT(c.rope_theta == 5e6f && c.partial_rotary == 0.5f);
	ASSERT(c.lin_k_heads == 16 && c.lin_v_heads == 32 &&
	       c.lin_k_dim == 128 && c.lin_v_dim == 128 && c.conv_kernel == 4);
	ASSERT(c.eps == 1e-6f && c.max_pos == 32768 && c.tie == 0);
	ASSERT(c.dtype == KERN_F16 && c.eos_id == 7);
	static const uint8_t want[6] = {0, 0, 1, 0, 0, 1};
	ASSERT(!memcmp(c.is_full, want, 6));

	/* rope_scaling, when an object, is where the parameters are read
	 * (transformers' precedence); "mrope" is plain RoPE for text. */
	lt_write_str(
	    dir, "config.json",
	    "{\"model_type\": \"qwen3_5_text\", \"vocab_size\": 1000, "
	    "\"hidden_size\": 64, \"num_hidden_layers\": 4, "
	    "\"intermediate_size\": 128, \"num_attention_heads\": 8, "
	    "\"num_key_value_heads\": 2, \"head_dim\": 32, "
	    "\"rope_theta\": 1.0, \"rope_parameters\": {\"rope_theta\": "
	    "2.0}, \"rope_scaling\": {\"type\": \"mrope\", "
	    "\"rope_theta\": 123456, \"mrope_section\": [2, 1, 1]}, "
	    "\"dtype\": \"float32\"}");
	ASSERT_RC(qwen35_config_load(dir, &c, err), 0, err);
	ASSERT(c.rope_theta == 123456.0f && c.rot_dim == 8);
	ASSERT(c.dtype == KERN_F32 && c.eos_id == -1);
	ASSERT(c.is_full[3] && !c.is_full[2]);
	lt_rmtree(dir);
}

int main(void)
{
	RUN(test_wrapper_27b);
	RUN(test_bare_text_defaults_and_old_rope);
	return lt_finish("test_config_layouts");
}
