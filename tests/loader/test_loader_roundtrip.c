/* test_loader_roundtrip: what st_write() writes, eng_ckpt_open() reads back
 * exactly — names, dtypes, shapes, bytes — for a single file (bf16, f16, f32,
 * a rank-0, an empty, a 4-D, an unaligned and an unsupported-dtype tensor)
 * and for two shards named by model.safetensors.index.json carrying both the
 * `model.` and `model.language_model.` prefixes. */
#include "loader_test.h"

#include "ckpt.h"
#include "ops.h"
#include "safetensors_write.h"

/* Compares t with the entry it was written from. */
static int same(const eng_tensor *t, const st_entry *e)
{
	if (!t || strcmp(t->name, e->name) || t->ndim != e->ndim)
		return 0;
	for (int i = 0; i < e->ndim; i++)
		if (t->shape[i] != e->shape[i])
			return 0;
	if (e->dtype_name ? t->dtype != ENG_DTYPE_OTHER ||
				strcmp(t->dtype_name, e->dtype_name)
			  : t->dtype != e->dtype)
		return 0;
	int64_t nb = st_entry_nbytes(e);
	return nb >= 0 && (size_t)nb == t->nbytes &&
	       (!nb || !memcmp(t->data, e->data, t->nbytes));
}

static void test_single_file(void)
{
	char dir[4096], err[MOOR_ERRLEN] = "";
	lt_tmpdir(dir);
	uint16_t bf[15], f16[24], odd[3];
	float f32[7], f4d[12], scalar = 3.5f;
	int64_t i64[2] = {-1, 1ll << 40};
	for (int i = 0; i < 15; i++)
		bf[i] = moor_f32_to_bf16((float)i - 7.0f);
	for (int i = 0; i < 24; i++)
		f16[i] = moor_f32_to_f16((float)i * 0.25f);
	for (int i = 0; i < 7; i++)
		f32[i] = (float)i / 8.0f - 0.3f;
	for (int i = 0; i < 12; i++)
		f4d[i] = (float)(i * i);
	for (int i = 0; i < 3; i++)
		odd[i] = moor_f32_to_bf16((float)(i + 1));
	static const int64_t s_bf[] = {5, 3}, s_f16[] = {2, 3, 4},
			     s_f32[] = {7}, s_empty[] = {0, 4},
			     s_4d[] = {2, 1, 2, 3}, s_odd[] = {3},
			     s_i64[] = {2};
	/* Sorted by name, "model.a_odd" (6 bytes) puts "model.b_after_odd"
	 * (f32) at an offset that is 2 mod 4: unaligned. */
	const st_entry e[] = {
	    {"model.embed_tokens.weight", KERN_BF16, NULL, 2, s_bf, bf},
	    {"model.layers.0.f16", KERN_F16, NULL, 3, s_f16, f16},
	    {"model.layers.0.linear_attn.A_log", KERN_F32, NULL, 1, s_f32, f32},
	    {"model.scalar", KERN_F32, NULL, 0, NULL, &scalar},
	    {"model.empty", KERN_BF16, NULL, 2, s_empty, NULL},
	    {"model.four_d", KERN_F32, NULL, 4, s_4d, f4d},
	    {"model.a_odd", KERN_BF16, NULL, 1, s_odd, odd},
	    {"model.b_after_odd", KERN_F32, NULL, 1, s_f32, f32},
	    {"model.position_ids", 0, "I64", 1, s_i64, i64},
	};
	const size_t n = sizeof e / sizeof e[0];
	char path[4096];
	lt_path(path, dir, "model.safetensors");
	ASSERT_RC(st_write(path, e, n, err), 0, err);

	/* The header as written: length padded so data start 8-aligned,
	 * __metadata__ first, then names in order. */
	size_t len;
	unsigned char *raw = lt_read(dir, "model.safetensors", &len);
	uint64_t hl = 0;
	for (int i = 7; i >= 0; i--)
		hl = hl << 8 | raw[i];
	ASSERT((8 + hl) % 8 == 0 && 8 + hl <= len);
	ASSERT(!memcmp(raw + 8, "{\"__metadata__\":{\"format\":\"pt\"}", 31));
	const char *hdr = (const char *)raw + 8;
	ASSERT(strstr(hdr, "\"model.a_odd\"") <
	       strstr(hdr, "\"model.b_after_odd\""));
	ASSERT(strstr(hdr, "\"model.b_after_odd\"") <
	       strstr(hdr, "\"model.embed_tokens.weight\""));
	free(raw);

	eng_ckpt *c;
	ASSERT_RC(eng_ckpt_open(dir, &c, err), 0, err);
	ASSERT(eng_ckpt_count(c) == n);
	for (size_t i = 0; i < n; i++) {
		const eng_tensor *t = eng_ckpt_find(c, e[i].name);
		if (!same(t, &e[i]))
			fprintf(stderr, "mismatch: %s\n", e[i].name);
		ASSERT(same(t, &e[i]));
		ASSERT(strstr(t->file, "/model.safetensors"));
	}
	/* eng_ckpt_at visits each tensor once, in data order. */
	const uint8_t *prev = NULL;
	for (size_t i = 0; i < n; i++) {
		const eng_tensor *t = eng_ckpt_at(c, i);
		ASSERT(t && eng_ckpt_find(c, t->name) == t);
		ASSERT(!prev || (const uint8_t *)t->data >= prev);
		prev = t->data;
	}
	ASSERT(eng_ckpt_at(c, n) == NULL);
	ASSERT(eng_ckpt_find(c, "model.nope") == NULL);

	const eng_tensor *t;
	ASSERT_RC(
	    eng_ckpt_get(c, "model.embed_tokens.weight", 2, s_bf, &t, err), 0,
	    err);
	ASSERT(t->dtype == KERN_BF16);
	ASSERT_RC(eng_ckpt_get(c, "model.scalar", 0, NULL, &t, err), 0, err);
	ASSERT(eng_tensor_numel(t) == 1);
	ASSERT_RC(eng_ckpt_get(c, "model.four_d", 4, s_4d, &t, err), 0, err);

	/* eng_tensor_to_f32 gives the values back, whatever the dtype and
	 * alignment. */
	float got[24];
	ASSERT_RC(eng_ckpt_get(c, "model.b_after_odd", 1, s_f32, &t, err), 0,
		  err);
	ASSERT((uintptr_t)t->data % 4 != 0); /* the case being exercised */
	ASSERT(eng_tensor_to_f32(t, got, 7) == 0);
	ASSERT(!memcmp(got, f32, sizeof f32));
	ASSERT(eng_tensor_to_f32(t, got, 6) == MOOR_ERANGE);
	ASSERT_RC(eng_ckpt_get(c, "model.layers.0.f16", 3, s_f16, &t, err), 0,
		  err);
	ASSERT(eng_tensor_to_f32(t, got, 24) == 0);
	for (int i = 0; i < 24; i++)
		ASSERT(got[i] == (float)i * 0.25f);
	t = eng_ckpt_find(c, "model.embed_tokens.weight");
	ASSERT(eng_tensor_to_f32(t, got, 15) == 0);
	for (int i = 0; i < 15; i++)
		ASSERT(got[i] == (float)i - 7.0f);
	ASSERT(eng_tensor_to_f32(eng_ckpt_find(c, "model.position_ids"), got,
				 2) == MOOR_EDTYPE);
	eng_ckpt_close(c);
	eng_ckpt_close(NULL);
	lt_rmtree(dir);
}

static void test_sharded_both_prefixes(void)
{
	char dir[4096], path[4096], err[MOOR_ERRLEN] = "";
	lt_tmpdir(dir);
	uint16_t a[8], b[6];
	float cc[4], d[5];
	for (int i = 0; i < 8; i++)
		a[i] = moor_f32_to_bf16((float)i);
	for (int i = 0; i < 6; i++)
		b[i] = moor_f32_to_f16((float)-i);
	for (int i = 0; i < 4; i++)
		cc[i] = (float)i * 1.5f;
	for (int i = 0; i < 5; i++)
		d[i] = (float)i * -0.5f;
	static const int64_t sa[] = {2, 4}, sb[] = {6}, sc[] = {4}, sd[] = {5};
	const st_entry s1[] = {
	    {"model.embed_tokens.weight", KERN_BF16, NULL, 2, sa, a},
	    {"model.layers.0.input_layernorm.weight", KERN_F16, NULL, 1, sb, b},
	};
	const st_entry s2[] = {
	    {"model.language_model.layers.0.linear_attn.dt_bias", KERN_F32,
	     NULL, 1, sc, cc},
	    {"model.language_model.norm.weight", KERN_F32, NULL, 1, sd, d},
	};
	lt_path(path, dir, "model-00001-of-00002.safetensors");
	ASSERT_RC(st_write(path, s1, 2, err), 0, err);
	lt_path(path, dir, "model-00002-of-00002.safetensors");
	ASSERT_RC(st_write(path, s2, 2, err), 0, err);
	lt_write_str(dir, "model.safetensors.index.json",
		     "{\"metadata\": {\"total_size\": 60}, \"weight_map\": {\n"
		     " \"model.embed_tokens.weight\": "
		     "\"model-00001-of-00002.safetensors\",\n"
		     " \"model.layers.0.input_layernorm.weight\": "
		     "\"model-00001-of-00002.safetensors\",\n"
		     " \"model.language_model.layers.0.linear_attn.dt_bias\": "
		     "\"model-00002-of-00002.safetensors\",\n"
		     " \"model.language_model.norm.weight\": "
		     "\"model-00002-of-00002.safetensors\"}}\n");
	eng_ckpt *c;
	ASSERT_RC(eng_ckpt_open(dir, &c, err), 0, err);
	ASSERT(eng_ckpt_count(c) == 4);
	for (int i = 0; i < 2; i++) {
		const eng_tensor *t = eng_ckpt_find(c, s1[i].name);
		ASSERT(same(t, &s1[i]));
		ASSERT(strstr(t->file, "model-00001-of-00002.safetensors"));
		t = eng_ckpt_find(c, s2[i].name);
		ASSERT(same(t, &s2[i]));
		ASSERT(strstr(t->file, "model-00002-of-00002.safetensors"));
	}
	const eng_tensor *t;
	ASSERT_RC(
	    eng_ckpt_get(c, "model.language_model.norm.weight", 1, sd, &t, err),
	    0, err);
	eng_ckpt_close(c);

	/* With a model.safetensors beside the index, the single file wins
	 * (transformers' order). */
	lt_path(path, dir, "model.safetensors");
	ASSERT_RC(st_write(path, s2 + 1, 1, err), 0, err);
	ASSERT_RC(eng_ckpt_open(dir, &c, err), 0, err);
	ASSERT(eng_ckpt_count(c) == 1);
	ASSERT(eng_ckpt_find(c, "model.language_model.norm.weight"));
	eng_ckpt_close(c);
	lt_rmtree(dir);
}

int main(void)
{
	RUN(test_single_file);
	RUN(test_sharded_both_prefixes);
	return lt_finish("test_loader_roundtrip");
}
