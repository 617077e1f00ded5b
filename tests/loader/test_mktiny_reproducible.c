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
#define MKTINY_FNV 0xfa12fe45c3492be8ull

static uint64_t fnv64(const unsigned char *p, size_t n)
{
	uint64_t h = 14695981039346656037ull;
	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 1099511628211ull;
	}
	return h;
}

static int expected_tensors(const qwen35_config *c, struct tspec *out);

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
	fprintf(stderr, "model.safetensors: %zu bytes, fnv1a64 0x%016llx\n",
		l1, (unsigned long long)h);
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
	struct tspec *ts = calloc(1024, sizeof *ts);
	int n = expected_tensors(&c, ts);
	ASSERT(n == 2 + 8 * 5 + 2 * 6 + 6 * 9);
	int ok = eng_ckpt_count(ck) == (size_t)n;
	for (int i = 0; ok && i < n; i++) {
		const eng_tensor *t;
		int rc = eng_ckpt_get(ck, ts[i].name, ts[i].ndim, ts[i].shape,
				      &t, err);
		if (rc || t->dtype != ts[i].dtype) {
			fprintf(stderr, "%s: rc %d dtype %d: %s\n", ts[i].name,
				rc, rc ? -1 : t->dtype, err);
			ok = 0;
		}
	}
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

/* SPEC §2, written out again here rather than taken from mktiny.c. */
static int expected_tensors(const qwen35_config *c, struct tspec *out)
{
	int n = 0;
	const int64_t H = c->hidden, I = c->inter, V = c->vocab,
		      D = c->head_dim, Hq = c->n_heads, Hkv = c->n_kv_heads,
		      Hv = c->lin_v_heads, dv = c->lin_v_dim,
		      kd = (int64_t)c->lin_k_heads * c->lin_k_dim,
		      vd = Hv * dv, cd = 2 * kd + vd, Kc = c->conv_kernel;
#define E(dt, nd, s0, s1, s2, ...)                                            \
	do {                                                                  \
		struct tspec *t = &out[n++];                                  \
		snprintf(t->name, sizeof t->name, __VA_ARGS__);               \
		t->dtype = dt;                                                \
		t->ndim = nd;                                                 \
		t->shape[0] = s0;                                             \
		t->shape[1] = s1;                                             \
		t->shape[2] = s2;                                             \
	} while (0)
	E(KERN_BF16, 2, V, H, 0, "model.embed_tokens.weight");
	E(KERN_BF16, 1, H, 0, 0, "model.norm.weight");
	for (int l = 0; l < c->layers; l++) {
		const char *p = "model.layers";
		E(KERN_BF16, 1, H, 0, 0, "%s.%d.input_layernorm.weight", p, l);
		E(KERN_BF16, 1, H, 0, 0, "%s.%d.post_attention_layernorm.weight",
		  p, l);
		E(KERN_BF16, 2, I, H, 0, "%s.%d.mlp.gate_proj.weight", p, l);
		E(KERN_BF16, 2, I, H, 0, "%s.%d.mlp.up_proj.weight", p, l);
		E(KERN_BF16, 2, H, I, 0, "%s.%d.mlp.down_proj.weight", p, l);
		if (c->is_full[l]) {
			E(KERN_BF16, 2, Hq * D * 2, H, 0,
			  "%s.%d.self_attn.q_proj.weight", p, l);
			E(KERN_BF16, 2, Hkv * D, H, 0,
			  "%s.%d.self_attn.k_proj.weight", p, l);
			E(KERN_BF16, 2, Hkv * D, H, 0,
			  "%s.%d.self_attn.v_proj.weight", p, l);
			E(KERN_BF16, 2, H, Hq * D, 0,
			  "%s.%d.self_attn.o_proj.weight", p, l);
			E(KERN_BF16, 1, D, 0, 0, "%s.%d.self_attn.q_norm.weight",
			  p, l);
			E(KERN_BF16, 1, D, 0, 0, "%s.%d.self_attn.k_norm.weight",
			  p, l);
		} else {
			E(KERN_BF16, 2, cd, H, 0,
			  "%s.%d.linear_attn.in_proj_qkv.weight", p, l);
			E(KERN_BF16, 2, vd, H, 0,
			  "%s.%d.linear_attn.in_proj_z.weight", p, l);
			E(KERN_BF16, 2, Hv, H, 0,
			  "%s.%d.linear_attn.in_proj_b.weight", p, l);
			E(KERN_BF16, 2, Hv, H, 0,
			  "%s.%d.linear_attn.in_proj_a.weight", p, l);
			E(KERN_BF16, 3, cd, 1, Kc,
			  "%s.%d.linear_attn.conv1d.weight", p, l);
			E(KERN_F32, 1, Hv, 0, 0, "%s.%d.linear_attn.dt_bias", p,
			  l);
			E(KERN_F32, 1, Hv, 0, 0, "%s.%d.linear_attn.A_log", p, l);
			E(KERN_F32, 1, dv, 0, 0,
			  "%s.%d.linear_attn.norm.weight", p, l);
			E(KERN_BF16, 2, H, vd, 0,
			  "%s.%d.linear_attn.out_proj.weight", p, l);
		}
	}
#undef E
	return n;
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
