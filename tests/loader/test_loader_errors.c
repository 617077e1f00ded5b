/* test_loader_errors: every malformed checkpoint or config fails with its
 * code and an error naming the file (and the tensor or field at fault),
 * never a crash (run it under ASan); a file truncated at any length fails;
 * flipped header bytes never crash; a failing write, fsync or rename of
 * st_write() leaves neither the target nor a temporary file behind. */
#include <dirent.h>

#include "loader_test.h"

#include "ckpt.h"
#include "config.h"
#include "ops.h"
#include "safetensors_write.h"

#define ST "model.safetensors"

/* Opens dir expecting failure `want`; err must name `file` and, if given,
 * `what` (a tensor or field; "" for none). */
#define EXPECT_OPEN_FAIL(dir, want, file, what)                                \
	do {                                                                   \
		eng_ckpt *c_ = (eng_ckpt *)1;                                  \
		char err_[MOOR_ERRLEN] = "";                                   \
		ASSERT_RC(eng_ckpt_open(dir, &c_, err_), want, err_);          \
		ASSERT(c_ == NULL);                                            \
		ASSERT_HAS(err_, file);                                        \
		ASSERT_HAS(err_, what);                                        \
	} while (0)

static void test_missing_dir_and_file(void)
{
	char dir[4096], sub[4096];
	lt_tmpdir(dir);
	lt_path(sub, dir, "no-such-dir");
	EXPECT_OPEN_FAIL(sub, -ENOENT, "no-such-dir", "");
	EXPECT_OPEN_FAIL(dir, -ENOENT, ST, "");
	lt_write_str(dir, "file", "x");
	lt_path(sub, dir, "file");
	EXPECT_OPEN_FAIL(sub, -ENOTDIR, "file", "");
	lt_rmtree(dir);
}

static void test_short_and_truncated_files(void)
{
	char dir[4096], err[MOOR_ERRLEN] = "";
	lt_tmpdir(dir);
	/* Shorter than the length prefix. */
	lt_write(dir, ST, "\x10\0\0", 3);
	EXPECT_OPEN_FAIL(dir, MOOR_ETRUNC, ST, "");
	/* A header length larger than the file. */
	lt_write_st_raw(dir, ST, "{}", 0, 1000);
	EXPECT_OPEN_FAIL(dir, MOOR_ETRUNC, ST, "header length 1000");
	/* Absurd header length (> 100 MiB) in a file that is long enough is
	 * not reachable cheaply; a zero one is. */
	lt_write(dir, ST, "\0\0\0\0\0\0\0\0{}", 10);
	EXPECT_OPEN_FAIL(dir, MOOR_EFORMAT, ST, "header length 0");
	/* A valid file cut short inside its data: the header claims more. */
	float v[16] = {0};
	static const int64_t s[] = {16};
	const st_entry e[] = {{"model.w", KERN_F32, NULL, 1, s, v}};
	char path[4096];
	lt_path(path, dir, ST);
	ASSERT_RC(st_write(path, e, 1, err), 0, err);
	size_t len;
	unsigned char *raw = lt_read(dir, ST, &len);
	ASSERT(truncate(path, (off_t)len - 4) == 0);
	free(raw);
	EXPECT_OPEN_FAIL(dir, MOOR_ETRUNC, ST, "model.w");
	lt_rmtree(dir);
}

static void test_malformed_header(void)
{
	char dir[4096];
	lt_tmpdir(dir);
	lt_write_st_raw(dir, ST, "{\"model.w\": {\"dtype\": \"F32\", ", 0, 0);
	EXPECT_OPEN_FAIL(dir, MOOR_EFORMAT, ST, "line 1");
	lt_write_st_raw(dir, ST, "[1, 2]", 0, 0);
	EXPECT_OPEN_FAIL(dir, MOOR_EFORMAT, ST, "not a JSON object");
	lt_write_st_raw(dir, ST, "{\"model.w\": 5}", 0, 0);
	EXPECT_OPEN_FAIL(dir, MOOR_EFORMAT, ST, "model.w");
	lt_write_st_raw(dir, ST,
			"{\"model.w\": {\"dtype\": \"F32\", \"shape\": [-1], "
			"\"data_offsets\": [0, 0]}}",
			0, 0);
	EXPECT_OPEN_FAIL(dir, MOOR_EFORMAT, ST, "model.w");
	lt_write_st_raw(dir, ST,
			"{\"model.w\": {\"dtype\": 7, \"shape\": [1], "
			"\"data_offsets\": [0, 4]}}",
			4, 0);
	EXPECT_OPEN_FAIL(dir, MOOR_EFORMAT, ST, "model.w");
	/* Duplicate keys would make the tensor ambiguous. */
	lt_write_st_raw(
	    dir, ST,
	    "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], "
	    "\"data_offsets\": [0, 4]}, \"a\": {\"dtype\": \"F32\", "
	    "\"shape\": [1], \"data_offsets\": [4, 8]}}",
	    8, 0);
	EXPECT_OPEN_FAIL(dir, MOOR_EFORMAT, ST, "duplicate");
	/* Shape whose product overflows. */
	lt_write_st_raw(dir, ST,
			"{\"model.w\": {\"dtype\": \"F32\", \"shape\": "
			"[4294967296, 4294967296], \"data_offsets\": [0, 4]}}",
			4, 0);
	EXPECT_OPEN_FAIL(dir, MOOR_EFORMAT, ST, "model.w");
	lt_rmtree(dir);
}

/* A header of metadata alone, no tensor (the loader fuzzer's find: the
 * overlap check sorted a NULL array, undefined behaviour under UBSan):
 * opens with no tensor, and a lookup names what is missing. */
static void test_no_tensors(void)
{
	char dir[4096], err[MOOR_ERRLEN] = "";
	lt_tmpdir(dir);
	lt_write_st_raw(dir, ST, "{\"__metadata__\": {\"format\": \"pt\"}}", 0,
			0);
	eng_ckpt *c = NULL;
	ASSERT_RC(eng_ckpt_open(dir, &c, err), 0, err);
	ASSERT(eng_ckpt_count(c) == 0);
	const eng_tensor *t = NULL;
	int64_t shape[1] = {1};
	ASSERT(eng_ckpt_get(c, "model.w", 1, shape, &t, err) != 0);
	ASSERT_HAS(err, "model.w");
	eng_ckpt_close(c);
	lt_rmtree(dir);
}

static void test_bad_data_offsets(void)
{
	char dir[4096];
	lt_tmpdir(dir);
	/* Out of range: past the end of the file. */
	lt_write_st_raw(dir, ST,
			"{\"model.w\": {\"dtype\": \"F32\", \"shape\": [2000], "
			"\"data_offsets\": [0, 8000]}}",
			8, 0);
	EXPECT_OPEN_FAIL(dir, MOOR_ETRUNC, ST, "model.w");
	/* Reversed. */
	lt_write_st_raw(dir, ST,
			"{\"model.w\": {\"dtype\": \"F32\", \"shape\": [0], "
			"\"data_offsets\": [8, 4]}}",
			8, 0);
	EXPECT_OPEN_FAIL(dir, MOOR_EFORMAT, ST, "model.w");
	/* Not two integers. */
	lt_write_st_raw(dir, ST,
			"{\"model.w\": {\"dtype\": \"F32\", \"shape\": [1], "
			"\"data_offsets\": [0]}}",
			8, 0);
	EXPECT_OPEN_FAIL(dir, MOOR_EFORMAT, ST, "model.w");
	/* Inconsistent with shape x dtype: 3 f32 need 12 bytes, not 8. */
	lt_write_st_raw(dir, ST,
			"{\"model.w\": {\"dtype\": \"F32\", \"shape\": [3], "
			"\"data_offsets\": [0, 8]}}",
			8, 0);
	EXPECT_OPEN_FAIL(dir, MOOR_EFORMAT, ST, "model.w");
	/* The same for a dtype moor does not load but can size. */
	lt_write_st_raw(dir, ST,
			"{\"model.ids\": {\"dtype\": \"I64\", \"shape\": [3], "
			"\"data_offsets\": [0, 16]}}",
			16, 0);
	EXPECT_OPEN_FAIL(dir, MOOR_EFORMAT, ST, "model.ids");
	/* Overlapping tensors. */
	lt_write_st_raw(dir, ST,
			"{\"model.a\": {\"dtype\": \"F32\", \"shape\": [2], "
			"\"data_offsets\": [0, 8]}, \"model.b\": {\"dtype\": "
			"\"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}",
			12, 0);
	EXPECT_OPEN_FAIL(dir, MOOR_EFORMAT, ST, "overlap");
	lt_rmtree(dir);
}

static void test_get_shape_dtype_missing(void)
{
	char dir[4096], path[4096], err[MOOR_ERRLEN] = "";
	lt_tmpdir(dir);
	static uint16_t w[128 * 64];
	static const int64_t s[] = {128, 64}, s3[] = {3};
	int64_t ids[3] = {1, 2, 3};
	uint8_t f8[3] = {1, 2, 3};
	const st_entry e[] = {
	    {"model.layers.3.mlp.up_proj.weight", KERN_BF16, NULL, 2, s, w},
	    {"model.ids", 0, "I64", 1, s3, ids},
	    {"model.f8", 0, "F8_E4M3", 1, s3, f8},
	};
	lt_path(path, dir, ST);
	ASSERT_RC(st_write(path, e, 3, err), 0, err);
	/* An unknown dtype string is kept (only offsets checked). */
	eng_ckpt *c;
	ASSERT_RC(eng_ckpt_open(dir, &c, err), 0, err);
	const eng_tensor *t = (const eng_tensor *)1;
	static const int64_t want[] = {128, 32};
	ASSERT_RC(eng_ckpt_get(c, "model.layers.3.mlp.up_proj.weight", 2, want,
			       &t, err),
		  MOOR_ESHAPE, err);
	ASSERT(t == NULL);
	ASSERT_HAS(err, "model.safetensors: tensor "
			"model.layers.3.mlp.up_proj.weight: shape [128, 64], "
			"expected [128, 32]");
	static const int64_t want3[] = {128, 64, 1};
	ASSERT_RC(eng_ckpt_get(c, "model.layers.3.mlp.up_proj.weight", 3, want3,
			       &t, err),
		  MOOR_ESHAPE, err);
	ASSERT_HAS(err, "expected [128, 64, 1]");
	ASSERT_RC(eng_ckpt_get(c, "model.ids", 1, s3, &t, err), MOOR_EDTYPE,
		  err);
	ASSERT_HAS(err, ST);
	ASSERT_HAS(err, "model.ids");
	ASSERT_HAS(err, "I64");
	ASSERT_RC(eng_ckpt_get(c, "model.f8", 1, s3, &t, err), MOOR_EDTYPE,
		  err);
	ASSERT_HAS(err, "F8_E4M3");
	ASSERT_RC(eng_ckpt_get(c, "model.norm.weight", 1, s3, &t, err),
		  MOOR_EMISSING, err);
	ASSERT_HAS(err, ST);
	ASSERT_HAS(err, "model.norm.weight");
	eng_ckpt_close(c);

	/* A dtype safetensors may grow later: kept, refused when asked for;
	 * and a 5-D tensor (a vision conv3d) likewise. */
	lt_write_st_raw(dir, ST,
			"{\"model.q\": {\"dtype\": \"Q4_NEW\", \"shape\": [7], "
			"\"data_offsets\": [0, 4]}, \"model.visual.p\": "
			"{\"dtype\": \"BF16\", \"shape\": [1, 1, 1, 1, 2], "
			"\"data_offsets\": [4, 8]}}",
			8, 0);
	ASSERT_RC(eng_ckpt_open(dir, &c, err), 0, err);
	ASSERT_RC(eng_ckpt_get(c, "model.q", 1, (const int64_t[]){7}, &t, err),
		  MOOR_EDTYPE, err);
	ASSERT_HAS(err, "Q4_NEW");
	t = eng_ckpt_find(c, "model.visual.p");
	ASSERT(t && t->ndim == 5);
	ASSERT_RC(eng_ckpt_get(c, "model.visual.p", 4,
			       (const int64_t[]){1, 1, 1, 1}, &t, err),
		  MOOR_ESHAPE, err);
	ASSERT_HAS(err, "5 dims");
	eng_ckpt_close(c);
	lt_rmtree(dir);
}

static void write_two_shards(const char *dir, char *err, int *ok)
{
	char path[4096];
	float v[2] = {1, 2};
	static const int64_t s[] = {2};
	const st_entry a[] = {{"model.a", KERN_F32, NULL, 1, s, v}};
	const st_entry b[] = {{"model.b", KERN_F32, NULL, 1, s, v}};
	lt_path(path, dir, "s1.safetensors");
	*ok = st_write(path, a, 1, err) == 0;
	lt_path(path, dir, "s2.safetensors");
	*ok &= st_write(path, b, 1, err) == 0;
}

static void test_bad_index(void)
{
	char dir[4096], err[MOOR_ERRLEN] = "";
	int ok;
	lt_tmpdir(dir);
	write_two_shards(dir, err, &ok);
	ASSERT(ok);
	const char *ix = "model.safetensors.index.json";
	/* Names a shard that does not exist. */
	lt_write_str(dir, ix,
		     "{\"weight_map\": {\"model.a\": \"s1.safetensors\", "
		     "\"model.b\": \"s9.safetensors\"}}");
	EXPECT_OPEN_FAIL(dir, -ENOENT, "s9.safetensors", ix);
	/* Maps a tensor to a shard that lacks it. */
	lt_write_str(dir, ix,
		     "{\"weight_map\": {\"model.a\": \"s1.safetensors\", "
		     "\"model.b\": \"s1.safetensors\", \"model.z\": "
		     "\"s2.safetensors\"}}");
	EXPECT_OPEN_FAIL(dir, MOOR_EMISSING, ix, "model.b");
	/* A tensor in two shards. */
	char path[4096];
	float v[2] = {1, 2};
	static const int64_t s[] = {2};
	const st_entry a[] = {{"model.a", KERN_F32, NULL, 1, s, v}};
	lt_path(path, dir, "s3.safetensors");
	ASSERT_RC(st_write(path, a, 1, err), 0, err);
	lt_write_str(dir, ix,
		     "{\"weight_map\": {\"model.a\": \"s1.safetensors\", "
		     "\"model.x\": \"s3.safetensors\"}}");
	EXPECT_OPEN_FAIL(dir, MOOR_EFORMAT, "s3.safetensors", "model.a");
	/* Malformed, without weight_map, a path outside the directory. */
	lt_write_str(dir, ix, "{\"weight_map\": {\"model.a\": ");
	EXPECT_OPEN_FAIL(dir, MOOR_EFORMAT, ix, "line");
	lt_write_str(dir, ix, "{\"metadata\": {}}");
	EXPECT_OPEN_FAIL(dir, MOOR_EFORMAT, ix, "weight_map");
	lt_write_str(dir, ix, "{\"weight_map\": {\"model.a\": \"../s1.x\"}}");
	EXPECT_OPEN_FAIL(dir, MOOR_EFORMAT, ix, "model.a");
	/* And a bad shard is named as such. */
	lt_write_st_raw(dir, "s2.safetensors", "{\"model.b\": {", 0, 0);
	lt_write_str(dir, ix,
		     "{\"weight_map\": {\"model.a\": \"s1.safetensors\", "
		     "\"model.b\": \"s2.safetensors\"}}");
	EXPECT_OPEN_FAIL(dir, MOOR_EFORMAT, "s2.safetensors", "malformed");
	lt_rmtree(dir);
}

/* ---- config.json ----------------------------------------------------------
 */

static const char *good_cfg =
    "{\"model_type\": \"qwen3_5_text\", \"vocab_size\": 1000, "
    "\"hidden_size\": 64, \"num_hidden_layers\": 4, "
    "\"intermediate_size\": 128, \"num_attention_heads\": 4, "
    "\"num_key_value_heads\": 2, \"head_dim\": 16, %s}";

static void write_cfg(const char *dir, const char *extra)
{
	char buf[4096];
	snprintf(buf, sizeof buf, good_cfg, extra);
	lt_write_str(dir, "config.json", buf);
}

#define EXPECT_CFG_FAIL(dir, want, what)                                       \
	do {                                                                   \
		qwen35_config cfg_;                                            \
		char err_[MOOR_ERRLEN] = "";                                   \
		ASSERT_RC(qwen35_config_load(dir, &cfg_, err_), want, err_);   \
		ASSERT_HAS(err_, "config.json");                               \
		ASSERT_HAS(err_, what);                                        \
		ASSERT(cfg_.layers == 0);                                      \
	} while (0)

static void test_config_errors(void)
{
	char dir[4096], sub[4096];
	lt_tmpdir(dir);
	EXPECT_CFG_FAIL(dir, -ENOENT, dir);
	lt_path(sub, dir, "none");
	EXPECT_CFG_FAIL(sub, -ENOENT, "none/config.json");

	lt_write_str(dir, "config.json",
		     "{\"model_type\": \"llama\", \"hidden_size\": 4}");
	EXPECT_CFG_FAIL(dir, MOOR_EUNSUP,
			"config.json: model_type \"llama\" is not supported "
			"(qwen3_5, qwen3_5_text)");
	lt_write_str(
	    dir, "config.json",
	    "{\"model_type\": \"qwen3_5_text\",\n \"vocab_size\": 1,,}");
	EXPECT_CFG_FAIL(dir, MOOR_EFORMAT, "line 2");
	lt_write_str(dir, "config.json", "[]");
	EXPECT_CFG_FAIL(dir, MOOR_EFORMAT, "not a JSON object");
	lt_write_str(dir, "config.json", "{\"model_type\": \"qwen3_5\"}");
	EXPECT_CFG_FAIL(dir, MOOR_EMISSING, "text_config");

	write_cfg(dir, "\"layer_types\": [\"linear_attention\", "
		       "\"full_attention\"]");
	EXPECT_CFG_FAIL(dir, MOOR_ERANGE, "layer_types has 2 entries");
	write_cfg(dir, "\"layer_types\": [\"linear_attention\", "
		       "\"full_attention\", \"sliding_attention\", "
		       "\"full_attention\"]");
	EXPECT_CFG_FAIL(dir, MOOR_EUNSUP, "layer_types[2]");
	write_cfg(dir, "\"layer_types\": \"full_attention\"");
	EXPECT_CFG_FAIL(dir, MOOR_EFORMAT, "layer_types");

	lt_write_str(dir, "config.json",
		     "{\"model_type\": \"qwen3_5_text\", \"vocab_size\": 10}");
	EXPECT_CFG_FAIL(dir, MOOR_EMISSING, "hidden_size");
	write_cfg(dir, "\"linear_num_key_heads\": 0");
	EXPECT_CFG_FAIL(dir, MOOR_ERANGE, "linear_num_key_heads");
	write_cfg(dir, "\"linear_num_key_heads\": \"4\"");
	EXPECT_CFG_FAIL(dir, MOOR_EFORMAT, "linear_num_key_heads");
	write_cfg(dir, "\"linear_num_key_heads\": 3, "
		       "\"linear_num_value_heads\": 4");
	EXPECT_CFG_FAIL(dir, MOOR_ERANGE, "linear_num_value_heads");
	/* A duplicated key is ambiguous. */
	write_cfg(dir, "\"num_key_value_heads\": 3");
	EXPECT_CFG_FAIL(dir, MOOR_EFORMAT, "duplicate");
	lt_write_str(dir, "config.json",
		     "{\"model_type\": \"qwen3_5_text\", \"vocab_size\": 1000, "
		     "\"hidden_size\": 64, \"num_hidden_layers\": 4, "
		     "\"intermediate_size\": 128, \"num_attention_heads\": 4, "
		     "\"num_key_value_heads\": 3}");
	EXPECT_CFG_FAIL(dir, MOOR_ERANGE, "num_key_value_heads");
	lt_write_str(dir, "config.json",
		     "{\"model_type\": \"qwen3_5_text\", \"vocab_size\": 1000, "
		     "\"hidden_size\": 64, \"num_hidden_layers\": 300, "
		     "\"intermediate_size\": 128, \"num_attention_heads\": 4, "
		     "\"num_key_value_heads\": 2}");
	EXPECT_CFG_FAIL(dir, MOOR_ERANGE, "num_hidden_layers");
	/* head_dim 16 x 0.2 = 3.2 -> 3: odd. */
	write_cfg(dir, "\"partial_rotary_factor\": 0.2");
	EXPECT_CFG_FAIL(dir, MOOR_ERANGE, "rotary dim 3");
	write_cfg(dir, "\"rope_parameters\": {\"rope_type\": \"yarn\", "
		       "\"factor\": 4}");
	EXPECT_CFG_FAIL(dir, MOOR_EUNSUP, "yarn");
	write_cfg(dir, "\"dtype\": \"int8\"");
	EXPECT_CFG_FAIL(dir, MOOR_EUNSUP, "int8");
	write_cfg(dir, "\"eos_token_id\": 5000");
	EXPECT_CFG_FAIL(dir, MOOR_ERANGE, "eos_token_id");
	write_cfg(dir, "\"attn_output_gate\": false");
	EXPECT_CFG_FAIL(dir, MOOR_EUNSUP, "attn_output_gate");
	write_cfg(dir, "\"rms_norm_eps\": -1");
	EXPECT_CFG_FAIL(dir, MOOR_ERANGE, "rms_norm_eps");
	lt_rmtree(dir);
}

/* ---- sweeps ---------------------------------------------------------------
 */

/* A valid small file: three tensors of three dtypes. */
static void write_valid(const char *dir, char *err, int *ok)
{
	char path[4096];
	uint16_t a[6] = {1, 2, 3, 4, 5, 6};
	float b[3] = {1, 2, 3};
	uint16_t h[2] = {7, 8};
	static const int64_t sa[] = {2, 3}, sb[] = {3}, sh[] = {2};
	const st_entry e[] = {
	    {"model.embed_tokens.weight", KERN_BF16, NULL, 2, sa, a},
	    {"model.layers.0.linear_attn.A_log", KERN_F32, NULL, 1, sb, b},
	    {"model.norm.weight", KERN_F16, NULL, 1, sh, h},
	};
	lt_path(path, dir, ST);
	*ok = st_write(path, e, 3, err) == 0;
}

static void test_truncation_sweep(void)
{
	char dir[4096], err[MOOR_ERRLEN] = "";
	int ok;
	lt_tmpdir(dir);
	write_valid(dir, err, &ok);
	ASSERT(ok);
	size_t len;
	unsigned char *raw = lt_read(dir, ST, &len);
	eng_ckpt *c;
	ASSERT_RC(eng_ckpt_open(dir, &c, err), 0, err);
	eng_ckpt_close(c);
	/* Every length short of the whole file fails, naming the file. This
	 * covers 0..200 and everything past the header up to len - 1. */
	for (size_t cut = 0; cut < len; cut++) {
		lt_write(dir, ST, raw, cut);
		c = (eng_ckpt *)1;
		err[0] = 0;
		int rc = eng_ckpt_open(dir, &c, err);
		if (rc >= 0 || c || !strstr(err, ST))
			fprintf(stderr, "cut %zu: rc %d err %s\n", cut, rc,
				err);
		ASSERT(rc < 0 && c == NULL && strstr(err, ST));
	}
	/* Trailing bytes after the data are holes at the end: tolerated. */
	unsigned char *more = malloc(len + 16);
	memcpy(more, raw, len);
	memset(more + len, 0, 16);
	lt_write(dir, ST, more, len + 16);
	ASSERT_RC(eng_ckpt_open(dir, &c, err), 0, err);
	eng_ckpt_close(c);
	free(more);
	free(raw);
	lt_rmtree(dir);
}

/* Each header byte replaced by a few values: open may succeed or fail but
 * must not crash or read out of bounds (ASan), and a success still has every
 * tensor inside the file. */
static void test_header_byte_flips(void)
{
	char dir[4096], err[MOOR_ERRLEN] = "";
	int ok;
	lt_tmpdir(dir);
	write_valid(dir, err, &ok);
	ASSERT(ok);
	size_t len;
	unsigned char *raw = lt_read(dir, ST, &len);
	uint64_t hl = 0;
	for (int i = 7; i >= 0; i--)
		hl = hl << 8 | raw[i];
	static const unsigned char vals[] = {0, '9', '"', '}', 0xff};
	unsigned char *m = malloc(len);
	int opened = 0;
	for (size_t i = 0; i < 8 + hl; i++)
		for (size_t k = 0; k < sizeof vals; k++) {
			memcpy(m, raw, len);
			if (m[i] == vals[k])
				continue;
			m[i] = vals[k];
			lt_write(dir, ST, m, len);
			eng_ckpt *c = NULL;
			if (eng_ckpt_open(dir, &c, err) == 0) {
				opened++;
				for (size_t j = 0; j < eng_ckpt_count(c); j++) {
					const eng_tensor *t = eng_ckpt_at(c, j);
					volatile uint8_t sink = 0;
					for (size_t b = 0; b < t->nbytes; b++)
						sink ^= ((const uint8_t *)
							     t->data)[b];
					(void)sink;
				}
				eng_ckpt_close(c);
			} else {
				ASSERT(c == NULL && strstr(err, ST));
			}
		}
	ASSERT(opened > 0); /* e.g. a changed space of padding */
	free(m);
	free(raw);
	lt_rmtree(dir);
}

static int count_entries(const char *dir)
{
	DIR *d = opendir(dir);
	int n = 0;
	struct dirent *de;
	while (d && (de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			n++;
	if (d)
		closedir(d);
	return n;
}

/* Fails the 1st, 2nd, ... step of st_write() until none fires: each failure
 * returns an error naming the path, and leaves the directory empty. */
static void test_writer_fault_sweep(void)
{
	char dir[4096], path[4096], err[MOOR_ERRLEN] = "";
	lt_tmpdir(dir);
	lt_path(path, dir, ST);
	float v[4] = {1, 2, 3, 4};
	static const int64_t s[] = {4};
	const st_entry e[] = {{"a", KERN_F32, NULL, 1, s, v},
			      {"b", KERN_F32, NULL, 1, s, v}};
	int nth;
	for (nth = 1; nth < 100; nth++) {
		st_fault_set(nth);
		err[0] = 0;
		int rc = st_write(path, e, 2, err);
		st_fault_set(0);
		if (rc == 0)
			break;
		ASSERT(rc < 0);
		ASSERT_HAS(err, path);
		/* Until the rename ran, nothing is left; the last step (the
		 * directory fsync) fails after the rename. */
		int n = count_entries(dir);
		ASSERT(n == 0 || (n == 1 && access(path, F_OK) == 0));
		if (n)
			break;
	}
	ASSERT(nth >= 5); /* header, 2 tensors, fsync, rename at least */
	/* An error for a bad entry, and an unwritable directory. */
	static const int64_t neg[] = {-1};
	const st_entry bad[] = {{"a", KERN_F32, NULL, 1, neg, v}};
	unlink(path);
	ASSERT_RC(st_write(path, bad, 1, err), MOOR_ERANGE, err);
	ASSERT_HAS(err, "tensor a");
	const st_entry dup[] = {e[0], e[0]};
	ASSERT_RC(st_write(path, dup, 2, err), MOOR_ERANGE, err);
	char nodir[4096];
	lt_path(nodir, dir, "missing/model.safetensors");
	ASSERT(st_write(nodir, e, 2, err) == -ENOENT);
	ASSERT_HAS(err, "missing/model.safetensors");
	ASSERT(count_entries(dir) == 0);
	lt_rmtree(dir);
}

int main(void)
{
	RUN(test_missing_dir_and_file);
	RUN(test_short_and_truncated_files);
	RUN(test_malformed_header);
	RUN(test_no_tensors);
	RUN(test_bad_data_offsets);
	RUN(test_get_shape_dtype_missing);
	RUN(test_bad_index);
	RUN(test_config_errors);
	RUN(test_truncation_sweep);
	RUN(test_header_byte_flips);
	RUN(test_writer_fault_sweep);
	return lt_finish("test_loader_errors");
}
