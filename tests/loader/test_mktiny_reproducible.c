/* test_mktiny_reproducible: the tiny-model generator writes the same bytes
 * twice, and bytes whose hash is pinned here (so they are the same bytes on
 * every machine and build); what it writes loads through qwen35_config_load()
 * and eng_ckpt_open() with the config of the brief and every tensor SPEC §2
 * names for it, at its shape and dtype, and nothing else. */
#define MKTINY_NO_MAIN
#include "tools/mktiny.c"

#include "loader_test.h"

#include "ckpt.h"

/* FNV-1a 64 of the model.safetensors moor-mktiny writes. Changing the
 * generator's config, scales, seeds or writer changes it: update it then,
 * deliberately (and the sha256 the setup scripts record). */
#define MKTINY_FNV 0x5adb217ec82da210ull

static uint64_t fnv64(const unsigned char *p, size_t n)
{
	uint64_t h = 14695981039346656037ull;
	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 1099511628211ull;
	}
	return h;
}

static char dir1[4096], dir2[4096];

static void test_same_bytes_twice(void)
{
	char err[MOOR_ERRLEN] = "";
	double t0 = moor_now();
	ASSERT_RC(mktiny_write(dir1, NULL, err), 0, err);
	double t1 = moor_now();
	ASSERT_RC(mktiny_write(dir2, NULL, err), 0, err);
	fprintf(stderr, "mktiny_write: %.2f s\n", t1 - t0);
	size_t l1, l2, c1, c2;
	unsigned char *a = lt_read(dir1, "model.safetensors", &l1);
	unsigned char *b = lt_read(dir2, "model.safetensors", &l2);
	unsigned char *ca = lt_read(dir1, "config.json", &c1);
	unsigned char *cb = lt_read(dir2, "config.json", &c2);
	int same = l1 == l2 && !memcmp(a, b, l1);
	int same_cfg = c1 == c2 && !memcmp(ca, cb, c1);
	uint64_t h = fnv64(a, l1);
	fprintf(stderr, "model.safetensors: %zu bytes, fnv1a64 0x%016llx\n", l1,
		(unsigned long long)h);
	free(a);
	free(b);
	free(ca);
	free(cb);
	ASSERT(same);
	ASSERT(same_cfg);
	ASSERT(h == MKTINY_FNV);
}

static void test_loads_with_spec_shapes(void)
{
	char err[MOOR_ERRLEN] = "";
	qwen35_config c;
	ASSERT_RC(qwen35_config_load(dir1, &c, err), 0, err);
	ASSERT(!strcmp(c.model_type, "qwen3_5_text"));
	ASSERT(c.vocab == 151669 && c.hidden == 256 && c.layers == 8 &&
	       c.inter == 768);
	for (int i = 0; i < 8; i++)
		ASSERT(c.is_full[i] == (i == 3 || i == 7));
	ASSERT(c.n_heads == 4 && c.n_kv_heads == 2 && c.head_dim == 64);
	ASSERT(c.lin_k_heads == 2 && c.lin_v_heads == 4 && c.lin_k_dim == 64 &&
	       c.lin_v_dim == 64 && c.conv_kernel == 4);
	ASSERT(c.eps == 1e-6f && c.rope_theta == 1e7f &&
	       c.partial_rotary == 0.25f && c.rot_dim == 16);
	ASSERT(c.tie == 1 && c.max_pos == 262144 && c.dtype == KERN_BF16 &&
	       c.eos_id == 151645);

	eng_ckpt *ck;
	ASSERT_RC(eng_ckpt_open(dir1, &ck, err), 0, err);
	/* bf16, but the three small GDN tensors f32. */
	struct lt_tensor *ts = calloc(LT_MAX_TENSORS, sizeof *ts);
	int n = lt_spec_tensors(&c, "model.", ts);
	ASSERT(n == 2 + 8 * 5 + 2 * 6 + 6 * 9);
	for (int i = 0; i < n; i++)
		ts[i].dtype = ts[i].small_f32 ? KERN_F32 : KERN_BF16;
	int ok = lt_check_tensors(ck, ts, n);
	ASSERT(!eng_ckpt_find(ck, "lm_head.weight"));
	/* The scales, roughly: embedding std 1, A_log in [-1, 1), the GDN
	 * norm around 1, q_proj std 1/sqrt(256). */
	const eng_tensor *t = eng_ckpt_find(ck, "model.embed_tokens.weight");
	double s2 = 0;
	for (size_t i = 0; i < 1 << 20; i++) {
		uint16_t h;
		memcpy(&h, (const char *)t->data + 2 * i, 2);
		double v = moor_bf16_to_f32(h);
		s2 += v * v;
	}
	s2 /= 1 << 20;
	float al[4], nw[64];
	const eng_tensor *ta =
	    eng_ckpt_find(ck, "model.layers.0.linear_attn.A_log");
	const eng_tensor *tn =
	    eng_ckpt_find(ck, "model.layers.0.linear_attn.norm.weight");
	int cv = ta && tn && !eng_tensor_to_f32(ta, al, 4) &&
		 !eng_tensor_to_f32(tn, nw, 64);
	eng_ckpt_close(ck);
	free(ts);
	ASSERT(ok);
	ASSERT(s2 > 0.98 && s2 < 1.02);
	ASSERT(cv);
	for (int i = 0; i < 4; i++)
		ASSERT(al[i] >= -1 && al[i] < 1);
	double m = 0;
	for (int i = 0; i < 64; i++)
		m += nw[i];
	ASSERT(m / 64 > 0.95 && m / 64 < 1.05);
}

int main(void)
{
	lt_tmpdir(dir1);
	lt_tmpdir(dir2);
	RUN(test_same_bytes_twice);
	RUN(test_loads_with_spec_shapes);
	lt_rmtree(dir1);
	lt_rmtree(dir2);
	return lt_finish("test_mktiny_reproducible");
}
