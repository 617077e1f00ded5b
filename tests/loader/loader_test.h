/* loader_test.h: the assertion macros and temp-directory helpers of the
 * loader tests (tests/loader). Header-only: each test is one program. */
#ifndef LOADER_TEST_H
#define LOADER_TEST_H

#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt.h"
#include "config.h"
#include "moor.h"
#include "ops.h"

static int lt_failures;

#define ASSERT(x)                                                              \
	do {                                                                   \
		if (!(x)) {                                                    \
			fprintf(stderr, "%s:%d: ASSERT failed: %s\n",          \
				__FILE__, __LINE__, #x);                       \
			lt_failures++;                                         \
			return;                                                \
		}                                                              \
	} while (0)

/* rc must be `want`; prints both codes and err otherwise. */
#define ASSERT_RC(rc, want, err)                                               \
	do {                                                                   \
		int rc_ = (rc), want_ = (want);                                \
		if (rc_ != want_) {                                            \
			fprintf(stderr,                                        \
				"%s:%d: rc %d (%s), want %d (%s); err: %s\n",  \
				__FILE__, __LINE__, rc_, moor_strerror(rc_),   \
				want_, moor_strerror(want_), (err));           \
			lt_failures++;                                         \
			return;                                                \
		}                                                              \
	} while (0)

/* err must contain s. */
#define ASSERT_HAS(err, s)                                                     \
	do {                                                                   \
		if (!strstr((err), (s))) {                                     \
			fprintf(stderr,                                        \
				"%s:%d: error message lacks \"%s\": %s\n",     \
				__FILE__, __LINE__, (s), (err));               \
			lt_failures++;                                         \
			return;                                                \
		}                                                              \
	} while (0)

#define RUN(fn)                                                                \
	do {                                                                   \
		int before_ = lt_failures;                                     \
		fn();                                                          \
		fprintf(stderr, "%s %s\n",                                     \
			lt_failures == before_ ? "ok  " : "FAIL", #fn);        \
	} while (0)

/* A fresh directory under $TMPDIR (or /tmp), into out[4096]. */
static inline void lt_tmpdir(char *out)
{
	const char *t = getenv("TMPDIR");
	snprintf(out, 4096, "%s/moor-loader-XXXXXX", t && *t ? t : "/tmp");
	if (!mkdtemp(out)) {
		perror("mkdtemp");
		exit(2);
	}
}

static inline int lt_rm_one(const char *p, const struct stat *sb, int flag,
			    struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(p);
}

static inline void lt_rmtree(const char *dir)
{
	nftw(dir, lt_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static inline void lt_path(char *out, const char *dir, const char *name)
{
	if (snprintf(out, 4096, "%s/%s", dir, name) >= 4096) {
		fprintf(stderr, "path too long: %s/%s\n", dir, name);
		exit(2);
	}
}

/* Writes len bytes to dir/name; exits on failure (a test bug). */
static inline void lt_write(const char *dir, const char *name, const void *p,
			    size_t len)
{
	char path[4096];
	lt_path(path, dir, name);
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(p, 1, len, f) != len || fclose(f)) {
		perror(path);
		exit(2);
	}
}

static inline void lt_write_str(const char *dir, const char *name,
				const char *s)
{
	lt_write(dir, name, s, strlen(s));
}

/* The whole of dir/name, malloc'd; *len its size. Exits on failure. */
static inline unsigned char *lt_read(const char *dir, const char *name,
				     size_t *len)
{
	char path[4096];
	lt_path(path, dir, name);
	FILE *f = fopen(path, "rb");
	if (!f) {
		perror(path);
		exit(2);
	}
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	unsigned char *b = malloc((size_t)n + 1);
	if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) {
		perror(path);
		exit(2);
	}
	fclose(f);
	*len = (size_t)n;
	return b;
}

/* A safetensors file from a literal header (padded to 8 with spaces) and
 * data_len bytes of data (0xA5); hlen_claim != 0 overrides the length. */
static inline void lt_write_st_raw(const char *dir, const char *name,
				   const char *header, size_t data_len,
				   uint64_t hlen_claim)
{
	size_t jl = strlen(header), hl = (jl + 7) & ~(size_t)7;
	size_t total = 8 + hl + data_len;
	unsigned char *b = malloc(total);
	uint64_t h = hlen_claim ? hlen_claim : hl;
	for (int i = 0; i < 8; i++)
		b[i] = (unsigned char)(h >> (8 * i));
	memcpy(b + 8, header, jl);
	memset(b + 8 + jl, ' ', hl - jl);
	memset(b + 8 + hl, 0xA5, data_len);
	lt_write(dir, name, b, total);
	free(b);
}

/* ---- SPEC §2, written out independently of mktiny.c ---------------------- */

#define LT_MAX_TENSORS 4096

struct lt_tensor {
	char name[128];
	int ndim;
	int64_t shape[3];
	int small_f32; /* A_log, dt_bias, linear_attn.norm.weight */
	int dtype;     /* the caller's expectation; -1: any of the three */
};

/* Every tensor SPEC §2 names for config c, under `prefix` ("model." or
 * "model.language_model."), plus lm_head.weight when untied. dtype is -1. */
static inline int lt_spec_tensors(const qwen35_config *c, const char *prefix,
				  struct lt_tensor *out)
{
	int n = 0;
	const int64_t H = c->hidden, I = c->inter, V = c->vocab,
		      D = c->head_dim, Hq = c->n_heads, Hkv = c->n_kv_heads,
		      Hv = c->lin_v_heads, dv = c->lin_v_dim,
		      kd = (int64_t)c->lin_k_heads * c->lin_k_dim, vd = Hv * dv,
		      cd = 2 * kd + vd, Kc = c->conv_kernel;
#define E(f32, nd, s0, s1, s2, ...)                                            \
	do {                                                                   \
		struct lt_tensor *t = &out[n++];                               \
		snprintf(t->name, sizeof t->name, __VA_ARGS__);                \
		t->small_f32 = f32;                                            \
		t->dtype = -1;                                                 \
		t->ndim = nd;                                                  \
		t->shape[0] = s0;                                              \
		t->shape[1] = s1;                                              \
		t->shape[2] = s2;                                              \
	} while (0)
	const char *p = prefix;
	E(0, 2, V, H, 0, "%sembed_tokens.weight", p);
	E(0, 1, H, 0, 0, "%snorm.weight", p);
	if (!c->tie)
		E(0, 2, V, H, 0, "lm_head.weight");
	for (int l = 0; l < c->layers; l++) {
		E(0, 1, H, 0, 0, "%slayers.%d.input_layernorm.weight", p, l);
		E(0, 1, H, 0, 0, "%slayers.%d.post_attention_layernorm.weight",
		  p, l);
		E(0, 2, I, H, 0, "%slayers.%d.mlp.gate_proj.weight", p, l);
		E(0, 2, I, H, 0, "%slayers.%d.mlp.up_proj.weight", p, l);
		E(0, 2, H, I, 0, "%slayers.%d.mlp.down_proj.weight", p, l);
		if (c->is_full[l]) {
			E(0, 2, Hq * D * 2, H, 0,
			  "%slayers.%d.self_attn.q_proj.weight", p, l);
			E(0, 2, Hkv * D, H, 0,
			  "%slayers.%d.self_attn.k_proj.weight", p, l);
			E(0, 2, Hkv * D, H, 0,
			  "%slayers.%d.self_attn.v_proj.weight", p, l);
			E(0, 2, H, Hq * D, 0,
			  "%slayers.%d.self_attn.o_proj.weight", p, l);
			E(0, 1, D, 0, 0, "%slayers.%d.self_attn.q_norm.weight",
			  p, l);
			E(0, 1, D, 0, 0, "%slayers.%d.self_attn.k_norm.weight",
			  p, l);
		} else {
			E(0, 2, cd, H, 0,
			  "%slayers.%d.linear_attn.in_proj_qkv.weight", p, l);
			E(0, 2, vd, H, 0,
			  "%slayers.%d.linear_attn.in_proj_z.weight", p, l);
			E(0, 2, Hv, H, 0,
			  "%slayers.%d.linear_attn.in_proj_b.weight", p, l);
			E(0, 2, Hv, H, 0,
			  "%slayers.%d.linear_attn.in_proj_a.weight", p, l);
			E(0, 3, cd, 1, Kc,
			  "%slayers.%d.linear_attn.conv1d.weight", p, l);
			E(1, 1, Hv, 0, 0, "%slayers.%d.linear_attn.dt_bias", p,
			  l);
			E(1, 1, Hv, 0, 0, "%slayers.%d.linear_attn.A_log", p,
			  l);
			E(1, 1, dv, 0, 0, "%slayers.%d.linear_attn.norm.weight",
			  p, l);
			E(0, 2, H, vd, 0,
			  "%slayers.%d.linear_attn.out_proj.weight", p, l);
		}
	}
#undef E
	return n;
}

/* The checkpoint holds exactly the n tensors of ts, each found by
 * eng_ckpt_get at its shape and, where ts says, of its dtype. */
static inline int lt_check_tensors(const eng_ckpt *ck,
				   const struct lt_tensor *ts, int n)
{
	char err[MOOR_ERRLEN] = "";
	int ok = 1;
	if (eng_ckpt_count(ck) != (size_t)n) {
		fprintf(stderr, "checkpoint has %zu tensors, expected %d\n",
			eng_ckpt_count(ck), n);
		ok = 0;
	}
	for (int i = 0; i < n; i++) {
		const eng_tensor *t;
		int rc = eng_ckpt_get(ck, ts[i].name, ts[i].ndim, ts[i].shape,
				      &t, err);
		if (rc || (ts[i].dtype >= 0 && t->dtype != ts[i].dtype)) {
			fprintf(stderr, "%s: rc %d dtype %d, want %d: %s\n",
				ts[i].name, rc, rc ? -9 : t->dtype, ts[i].dtype,
				err);
			ok = 0;
		}
	}
	return ok;
}

static inline int lt_finish(const char *name)
{
	if (lt_failures) {
		fprintf(stderr, "%s: %d failure(s)\n", name, lt_failures);
		return 1;
	}
	fprintf(stderr, "%s: all passed\n", name);
	return 0;
}

#endif
