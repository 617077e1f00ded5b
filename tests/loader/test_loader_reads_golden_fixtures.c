/* test_loader_reads_golden_fixtures: the checkpoints transformers itself
 * wrote (tests/golden: bf16 tied, f32 tied with r = 3, f32 untied) load, and
 * their config.json parse, to exactly the tensors SPEC §2 names at the shapes
 * their configs give, all in the config's dtype (the bf16 one keeps A_log,
 * dt_bias and the GDN norm in bf16 too). */
#include "loader_test.h"

static void check_fixture(const char *name, int layers, int tie, int dtype,
			  int hv)
{
	const char *src = getenv("MOOR_SRC");
	char dir[4096], err[MOOR_ERRLEN] = "";
	snprintf(dir, sizeof dir, "%s/tests/golden/%s", src ? src : ".", name);
	qwen35_config c;
	ASSERT_RC(qwen35_config_load(dir, &c, err), 0, err);
	ASSERT(c.vocab == 512 && c.hidden == 64 && c.inter == 128);
	ASSERT(c.layers == layers && c.tie == tie && c.dtype == dtype);
	ASSERT(c.n_heads == 4 && c.n_kv_heads == 2 && c.head_dim == 32);
	ASSERT(c.lin_k_heads == 2 && c.lin_v_heads == hv && c.lin_k_dim == 32 &&
	       c.lin_v_dim == 32 && c.conv_kernel == 4);
	ASSERT(c.rot_dim == 8 && c.rope_theta == 1e7f && c.eps == 1e-6f);
	ASSERT(c.eos_id == -1); /* "eos_token_id": null */
	for (int i = 0; i < layers; i++)
		ASSERT(c.is_full[i] == ((i + 1) % 4 == 0));
	eng_ckpt *ck;
	ASSERT_RC(eng_ckpt_open(dir, &ck, err), 0, err);
	struct lt_tensor *ts = calloc(LT_MAX_TENSORS, sizeof *ts);
	int n = lt_spec_tensors(&c, "model.", ts);
	for (int i = 0; i < n; i++)
		ts[i].dtype = dtype;
	int ok = lt_check_tensors(ck, ts, n);
	free(ts);
	eng_ckpt_close(ck);
	ASSERT(ok);
}

static void test_bf16_tied(void)
{
	check_fixture("bf16_tied", 8, 1, KERN_BF16, 4);
}

static void test_f32_tied_r3(void)
{
	check_fixture("f32_tied_r3", 4, 1, KERN_F32, 6);
}

static void test_f32_untied(void)
{
	check_fixture("f32_untied", 4, 0, KERN_F32, 4);
}

int main(void)
{
	RUN(test_bf16_tied);
	RUN(test_f32_tied_r3);
	RUN(test_f32_untied);
	return lt_finish("test_loader_reads_golden_fixtures");
}
