/* test_wload_exact: the fast checkpoint reader (engined/wload.h) puts
 * every tensor's bytes on the backend exactly as the file holds them.
 * Two shards (an index), tensors of odd byte counts (so the next one starts
 * at an unaligned offset), an empty one, tensors larger than a block and
 * many smaller than one; read with 1 and 3 threads, blocks of 4 KiB, 12 KiB
 * and the default 32 MiB, few slots and many, O_DIRECT asked for or not,
 * from pread and from the mapping (cfg.mmap);
 * each loaded buffer downloaded and memcmp'ed with the mapped file's bytes.
 * Then the errors: a shard cut shorter after the open is MOOR_ETRUNC naming
 * the file; the loader is reusable after a failed run.
 * MOOR_TEST_BACKEND picks the backend (the gpu suite: CUDA). */
#include "loader_test.h"

#include "ckpt.h"
#include "ops.h"
#include "safetensors_write.h"
#include "tb.h"
#include "wload.h"

#define NT 40

static const kern_ops *ops;
static kern_ctx *ctx;

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint8_t rnd8(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint8_t)(rng >> 24);
}

/* Writes a two-shard checkpoint: NT tensors of assorted sizes in dir. */
static void write_ckpt(const char *dir)
{
	static uint8_t *data[NT];
	static int64_t shape[NT][1];
	st_entry e[NT];
	char names[NT][64];
	for (int i = 0; i < NT; i++) {
		/* bf16 elements: odd counts, a few past 4 and 12 KiB blocks,
		 * one of 50 KiB, one empty */
		int64_t n = i == 7 ? 0 : i == 11 ? 25601 : (i % 5 == 0) ? 2049 + 3 * i : 1 + 37 * i;
		shape[i][0] = n;
		data[i] = malloc((size_t)(2 * n + 1));
		for (int64_t k = 0; k < 2 * n; k++)
			data[i][k] = rnd8();
		snprintf(names[i], sizeof names[i], "model.t%02d", i);
		e[i] = (st_entry){names[i], KERN_BF16, NULL, 1, shape[i], data[i]};
	}
	char path[4096], err[MOOR_ERRLEN] = "";
	lt_path(path, dir, "a.safetensors");
	if (st_write(path, e, NT / 2, err) || (lt_path(path, dir, "b.safetensors"),
					       st_write(path, e + NT / 2, NT - NT / 2, err))) {
		fprintf(stderr, "st_write: %s\n", err);
		exit(2);
	}
	char ix[8192];
	size_t k = (size_t)snprintf(ix, sizeof ix, "{\"weight_map\":{");
	for (int i = 0; i < NT; i++)
		k += (size_t)snprintf(ix + k, sizeof ix - k, "%s\"%s\":\"%s\"",
				      i ? "," : "", names[i],
				      i < NT / 2 ? "a.safetensors" : "b.safetensors");
	snprintf(ix + k, sizeof ix - k, "}}");
	lt_write_str(dir, "model.safetensors.index.json", ix);
	for (int i = 0; i < NT; i++)
		free(data[i]);
}

/* Loads every tensor of ck with cfg and compares it with the mapping. */
static void load_and_compare(eng_ckpt *ck, const eng_wload_cfg *cfg,
			     int add_twice)
{
	char err[MOOR_ERRLEN] = "";
	size_t n = eng_ckpt_count(ck);
	void *dst[NT] = {0};
	ASSERT(n == NT);
	eng_wload *w;
	ASSERT_RC(eng_wload_new(ops, ctx, cfg, &w), 0, "new");
	kern_queue *q = ops->queue(ctx, KERN_Q_COMPUTE);
	for (size_t i = 0; i < n; i++) {
		const eng_tensor *t = eng_ckpt_at(ck, i);
		ASSERT_RC(ops->alloc(ctx, t->nbytes ? t->nbytes : 1, &dst[i]), 0,
			  "alloc");
		ASSERT_RC(ops->zero(q, dst[i], t->nbytes ? t->nbytes : 1), 0,
			  "zero");
		/* the offset the reader preads is the mapping's */
		if (t->nbytes) {
			uint8_t *h = malloc(t->nbytes);
			int fd = open(t->file, O_RDONLY);
			ssize_t k = pread(fd, h, t->nbytes, (off_t)t->offset);
			close(fd);
			int same = k == (ssize_t)t->nbytes &&
				   !memcmp(h, t->data, t->nbytes);
			free(h);
			ASSERT(same);
		}
	}
	ASSERT_RC(ops->sync(q), 0, "sync");
	/* added out of file order: the reader sorts */
	for (size_t j = 0; j < n; j++) {
		size_t i = (j * 7) % n;
		ASSERT_RC(eng_wload_add(w, dst[i], eng_ckpt_at(ck, i)), 0, "add");
		if (add_twice)
			ASSERT_RC(eng_wload_add(w, dst[i], eng_ckpt_at(ck, i)), 0,
				  "add");
	}
	eng_wload_stats st;
	ASSERT_RC(eng_wload_run(w, &st, err), 0, err);
	uint64_t total = 0;
	for (size_t i = 0; i < n; i++) {
		const eng_tensor *t = eng_ckpt_at(ck, i);
		total += t->nbytes;
		if (!t->nbytes) {
			ops->free(ctx, dst[i]);
			continue;
		}
		uint8_t *h = malloc(t->nbytes);
		ASSERT_RC(ops->download(q, h, dst[i], t->nbytes), 0, "download");
		int same = !memcmp(h, t->data, t->nbytes);
		if (!same)
			fprintf(stderr, "tensor %s (%zu bytes at %llu) differs\n",
				t->name, t->nbytes, (unsigned long long)t->offset);
		free(h);
		ASSERT(same);
		ops->free(ctx, dst[i]);
	}
	ASSERT(st.bytes == (add_twice ? 2 : 1) * total);
	ASSERT(st.files == 2 && st.read_bytes >= total && st.blocks >= 2);
	ASSERT(st.pinned == (ops->host_alloc != NULL));
	fprintf(stderr, "  threads %d block %zu slots %d direct %d mmap %d: %llu "
			"bytes, %llu blocks, %d files O_DIRECT\n",
		cfg ? cfg->threads : 0, cfg ? cfg->block : 0, cfg ? cfg->slots : 0,
		cfg ? cfg->direct : 0, cfg ? cfg->mmap : 0,
		(unsigned long long)st.bytes,
		(unsigned long long)st.blocks, st.direct);
	eng_wload_free(w);
}

static char dir[4096];

static void test_bytes_exact(void)
{
	char err[MOOR_ERRLEN] = "";
	eng_ckpt *ck;
	ASSERT_RC(eng_ckpt_open(dir, &ck, err), 0, err);
	static const eng_wload_cfg cfgs[] = {
	    {.threads = 1, .block = 4096, .slots = 3},
	    {.threads = 3, .block = 4096, .slots = 4},
	    {.threads = 3, .block = 12288, .slots = 0, .direct = 1},
	    {.threads = 2, .block = 5000, .slots = 3}, /* rounded to 8 KiB */
	    {.threads = 3, .block = 4096, .slots = 4, .mmap = 1},
	    {.threads = 1, .block = 12288, .slots = 3, .mmap = 1},
	    {0},				       /* the defaults */
	};
	for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++)
		load_and_compare(ck, &cfgs[i], 0);
	load_and_compare(ck, NULL, 0);
	/* the same tensor twice: both copies land, nothing else moves */
	load_and_compare(ck, &cfgs[1], 1);
	eng_ckpt_close(ck);
}

static void test_short_file(void)
{
	char err[MOOR_ERRLEN] = "", path[4096];
	eng_ckpt *ck;
	ASSERT_RC(eng_ckpt_open(dir, &ck, err), 0, err);
	eng_wload *w;
	eng_wload_cfg cfg = {.threads = 2, .block = 4096};
	ASSERT_RC(eng_wload_new(ops, ctx, &cfg, &w), 0, "new");
	size_t n = eng_ckpt_count(ck);
	void *dst[NT] = {0};
	for (size_t i = 0; i < n; i++) {
		const eng_tensor *t = eng_ckpt_at(ck, i);
		ASSERT_RC(ops->alloc(ctx, t->nbytes ? t->nbytes : 1, &dst[i]), 0,
			  "alloc");
		ASSERT_RC(eng_wload_add(w, dst[i], t), 0, "add");
	}
	/* b.safetensors loses its last 100 bytes after the open (the
	 * mapping past the new end would fault; the reader preads) */
	lt_path(path, dir, "b.safetensors");
	struct stat sb;
	ASSERT(stat(path, &sb) == 0);
	ASSERT(truncate(path, sb.st_size - 100) == 0);
	int rc = eng_wload_run(w, NULL, err);
	ASSERT_RC(rc, MOOR_ETRUNC, err);
	ASSERT_HAS(err, "b.safetensors");
	ASSERT_HAS(err, "shorter");
	/* through the mapping too: said before a reader touches the pages
	 * past the end (a SIGBUS) */
	eng_wload_cfg cm = {.threads = 2, .block = 4096, .mmap = 1};
	eng_wload *wm;
	ASSERT_RC(eng_wload_new(ops, ctx, &cm, &wm), 0, "new");
	for (size_t i = 0; i < n; i++)
		ASSERT_RC(eng_wload_add(wm, dst[i], eng_ckpt_at(ck, i)), 0, "add");
	err[0] = 0;
	ASSERT_RC(eng_wload_run(wm, NULL, err), MOOR_ETRUNC, err);
	ASSERT_HAS(err, "b.safetensors");
	eng_wload_free(wm);
	/* reusable: a run of the first shard's tensors alone succeeds */
	for (size_t i = 0; i < NT / 2; i++)
		ASSERT_RC(eng_wload_add(w, dst[i], eng_ckpt_at(ck, i)), 0, "add");
	ASSERT_RC(eng_wload_run(w, NULL, err), 0, err);
	kern_queue *q = ops->queue(ctx, KERN_Q_COMPUTE);
	for (size_t i = 0; i < NT / 2; i++) {
		const eng_tensor *t = eng_ckpt_at(ck, i);
		if (!t->nbytes)
			continue;
		uint8_t *h = malloc(t->nbytes);
		ASSERT_RC(ops->download(q, h, dst[i], t->nbytes), 0, "download");
		int same = !memcmp(h, t->data, t->nbytes);
		free(h);
		ASSERT(same);
	}
	for (size_t i = 0; i < n; i++)
		ops->free(ctx, dst[i]);
	eng_wload_free(w);
	eng_ckpt_close(ck);
}

int main(void)
{
	ops = tb_backend("test_wload_exact");
	kern_config kc = {.threads = 1};
	if (ops->create(&kc, &ctx)) {
		fprintf(stderr, "backend %s: create failed\n", ops->name);
		return 1;
	}
	lt_tmpdir(dir);
	write_ckpt(dir);
	RUN(test_bytes_exact);
	RUN(test_short_file);
	lt_rmtree(dir);
	ops->destroy(ctx);
	return lt_failures ? 1 : 0;
}
