/* bench_load: how fast real safetensors reach the backend (the issue's
 * weight load >= 5 GB/s from the page cache).
 *
 *   bench_load CONFIG_DIR --dir DIR [--layers N] [--backend NAME]
 *              [--threads 1,4,8,16] [--block-mib M] [--direct 0|1]
 *              [--mmap 0|1|2]
 *              [--shard-gb G] [--cold 0|1] [--reuse 1]
 *
 * Writes into DIR a checkpoint of CONFIG_DIR's shapes cut to its first N
 * layers (default 8: at the 27B's width 11 GB with the embedding and the
 * lm_head, so it fits a 64 GB disk or /dev/shm), in shards of at most G GB
 * named by model.safetensors.index.json, as transformers writes them
 * (--reuse 1 keeps one already there). Then, from the page cache (--cold 1:
 * each shard's pages dropped first with posix_fadvise), times:
 *   - "mmap + upload": each tensor uploaded from the mapping, one thread
 *     (what a loader that hands upload() the mmapped checkpoint does);
 *   - "wload": engined/wload.h at each thread count: blocks pread by
 *     threads into staging (the backend's pinned host_alloc memory when it
 *     has one), each uploaded while the next ones are read; --mmap 1: the
 *     readers copy from the mapping instead, 2: both (default);
 *   - "eng_model_load": engined's whole load path as the model adapter
 *     calls it (the fused projections' copies included; on the CPU backend
 *     a wrap_host of the mapping, no copy);
 * and after the last wload run downloads every tensor and compares it with
 * the file's bytes (memcmp), so a fast path that changed a byte fails the
 * run (exit 1). Prints a table with GB/s and the ratio to the 5 GB/s goal. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt.h"
#include "config.h"
#include "eng.h"
#include "moor.h"
#include "safetensors_write.h"
#include "wload.h"

#include "../loader/loader_test.h"

#define GOAL_GBS 5.0

static void die(const char *what, const char *err)
{
	fprintf(stderr, "bench_load: %s%s%s\n", what, err && *err ? ": " : "",
		err ? err : "");
	exit(1);
}

/* CONFIG_DIR's config.json with its first `layers` layers, into DIR. */
static void write_config(const char *cfg_dir, const char *dir, int layers)
{
	char p[4096];
	snprintf(p, sizeof p, "%s/config.json", cfg_dir);
	json_error_t je;
	json_t *c = json_load_file(p, 0, &je);
	if (!c)
		die(p, je.text);
	json_t *tc = json_object_get(c, "text_config");
	json_t *o = json_is_object(tc) ? tc : c;
	json_t *lt = json_object_get(o, "layer_types");
	if (!json_is_array(lt) || (int)json_array_size(lt) < layers)
		die(p, "layer_types has fewer layers than --layers");
	while ((int)json_array_size(lt) > layers)
		json_array_remove(lt, json_array_size(lt) - 1);
	json_object_set_new(o, "num_hidden_layers", json_integer(layers));
	snprintf(p, sizeof p, "%s/config.json", dir);
	if (json_dump_file(c, p, JSON_INDENT(2)))
		die(p, "cannot write");
	json_decref(c);
}

static uint16_t bf16_small(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	/* +-[2^-7, 2^-6): finite values of a weight's size */
	return (uint16_t)((*x >> 20) & 0x807f) | 0x3c00;
}

static struct lt_tensor ts[LT_MAX_TENSORS];

/* The checkpoint: shards of at most shard_b bytes, every matrix bf16 of
 * seeded values (one buffer, each tensor a different window of it), the
 * small per-head vectors f32. Returns the bytes written. */
static uint64_t write_ckpt(const char *dir, uint64_t shard_b)
{
	char err[MOOR_ERRLEN] = "";
	qwen35_config c;
	int rc = qwen35_config_load(dir, &c, err);
	if (rc)
		die("config", err);
	int n = lt_spec_tensors(&c, "model.", ts);
	size_t maxb = 0;
	for (int i = 0; i < n; i++) {
		size_t e = (size_t)ts[i].shape[0] *
			   (size_t)(ts[i].ndim > 1 ? ts[i].shape[1] : 1) *
			   (size_t)(ts[i].ndim > 2 ? ts[i].shape[2] : 1);
		size_t b = e * (ts[i].small_f32 ? 4 : 2);
		maxb = b > maxb ? b : maxb;
	}
	/* 1 MiB of slack: tensor i starts i * 4 KiB + 2 bytes in */
	size_t pool_n = maxb / 2 + (1u << 19);
	uint16_t *pool = malloc(pool_n * 2);
	if (!pool)
		die("the value pool", strerror(ENOMEM));
	uint64_t x = 0x243f6a8885a308d3ull;
	for (size_t i = 0; i < pool_n; i++)
		pool[i] = bf16_small(&x);
	static float f32v[65536];
	for (int i = 0; i < 65536; i++)
		f32v[i] = -1.0f + (float)i / 65536.0f;
	st_entry *e = calloc((size_t)n, sizeof *e);
	int *shard = calloc((size_t)n, sizeof *shard);
	uint64_t total = 0, cur = 0;
	int ns = 0;
	for (int i = 0; i < n; i++) {
		size_t el = (size_t)ts[i].shape[0] *
			    (size_t)(ts[i].ndim > 1 ? ts[i].shape[1] : 1) *
			    (size_t)(ts[i].ndim > 2 ? ts[i].shape[2] : 1);
		size_t b = el * (ts[i].small_f32 ? 4 : 2);
		if (cur && cur + b > shard_b) {
			ns++;
			cur = 0;
		}
		shard[i] = ns;
		cur += b;
		total += b;
		const void *d = ts[i].small_f32
				    ? (const void *)f32v
				    : (const void *)(pool + ((size_t)i * 2049) %
								 (1u << 19));
		if (ts[i].small_f32 && el > 65536)
			die(ts[i].name, "a per-head vector over 65,536");
		e[i] = (st_entry){ts[i].name, ts[i].small_f32 ? KERN_F32 : KERN_BF16,
				  NULL, ts[i].ndim, ts[i].shape, d};
	}
	ns++;
	/* the shards: each its tensors in st_write's (name) order */
	json_t *wm = json_object();
	st_entry *part = calloc((size_t)n, sizeof *part);
	for (int s = 0; s < ns; s++) {
		int k = 0;
		char name[64], path[4096];
		snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors",
			 s + 1, ns);
		for (int i = 0; i < n; i++)
			if (shard[i] == s) {
				part[k++] = e[i];
				json_object_set_new(wm, ts[i].name,
						    json_string(name));
			}
		snprintf(path, sizeof path, "%s/%s", dir, name);
		double t0 = moor_now();
		if ((rc = st_write(path, part, (size_t)k, err)))
			die("st_write", err);
		fprintf(stderr, "bench_load: wrote %s (%d tensors) in %.1f s\n",
			path, k, moor_now() - t0);
	}
	json_t *ix = json_pack("{s:{s:I},s:o}", "metadata", "total_size",
			       (json_int_t)total, "weight_map", wm);
	char path[4096];
	snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
	if (json_dump_file(ix, path, JSON_INDENT(2)))
		die(path, "cannot write");
	json_decref(ix);
	free(part);
	free(shard);
	free(e);
	free(pool);
	return total;
}

static void drop_cache(const eng_ckpt *ck)
{
	const char *last = NULL;
	for (size_t i = 0; i < eng_ckpt_count(ck); i++) {
		const eng_tensor *t = eng_ckpt_at(ck, i);
		if (last && !strcmp(last, t->file))
			continue;
		last = t->file;
		int fd = open(t->file, O_RDONLY);
		if (fd >= 0) {
			(void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
			close(fd);
		}
	}
}

typedef struct row {
	char path[40];
	int threads;
	char staging[40];
	double gb, s;
} row;

static row rows[64];
static int nrows;

static void add_row(const char *path, int threads, const char *staging,
		    double gb, double s)
{
	row *r = &rows[nrows++];
	snprintf(r->path, sizeof r->path, "%s", path);
	r->threads = threads;
	snprintf(r->staging, sizeof r->staging, "%s", staging);
	r->gb = gb;
	r->s = s;
	fprintf(stderr, "bench_load: %s, %d threads: %.2f GB in %.3f s (%.2f "
			"GB/s)\n",
		path, threads, gb, s, s > 0 ? gb / s : 0.0);
}

int main(int argc, char **argv)
{
	(void)lt_failures;
	if (argc < 2)
		die("usage: bench_load CONFIG_DIR --dir DIR [--layers N] "
		    "[--backend NAME] [--threads 1,4,8,16] [--block-mib M] "
		    "[--direct 0|1] [--shard-gb G] [--cold 0|1] [--reuse 1]",
		    NULL);
	const char *cfg_dir = argv[1], *dir = NULL, *bname = "auto",
		   *thr = "1,4,8,16";
	int layers = 8, direct = 0, cold = 0, reuse = 0, mm = 2;
	double shard_gb = 4.0, block_mib = 32;
	for (int i = 2; i + 1 < argc; i += 2) {
		const char *k = argv[i], *v = argv[i + 1];
		if (!strcmp(k, "--dir"))
			dir = v;
		else if (!strcmp(k, "--layers"))
			layers = atoi(v);
		else if (!strcmp(k, "--backend"))
			bname = v;
		else if (!strcmp(k, "--threads"))
			thr = v;
		else if (!strcmp(k, "--block-mib"))
			block_mib = atof(v);
		else if (!strcmp(k, "--direct"))
			direct = atoi(v);
		else if (!strcmp(k, "--shard-gb"))
			shard_gb = atof(v);
		else if (!strcmp(k, "--cold"))
			cold = atoi(v);
		else if (!strcmp(k, "--reuse"))
			reuse = atoi(v);
		else if (!strcmp(k, "--mmap"))
			mm = atoi(v);
		else
			die(k, "unknown flag");
	}
	if (!dir || layers < 1 || block_mib <= 0 || shard_gb <= 0)
		die("--dir DIR is needed; --layers, --block-mib, --shard-gb "
		    "positive",
		    NULL);
	char why[MOOR_ERRLEN] = "", err[MOOR_ERRLEN] = "";
	const kern_ops *ops = eng_backend_pick(bname, 0, why);
	if (!ops)
		die("backend", why);
	fprintf(stderr, "bench_load: %s\n", why);

	/* ---- the checkpoint ---- */
	mkdir(dir, 0755);
	char ixp[4096];
	snprintf(ixp, sizeof ixp, "%s/model.safetensors.index.json", dir);
	struct stat sb;
	if (!(reuse && stat(ixp, &sb) == 0)) {
		write_config(cfg_dir, dir, layers);
		write_ckpt(dir, (uint64_t)(shard_gb * 1e9));
	}
	eng_ckpt *ck;
	if (eng_ckpt_open(dir, &ck, err))
		die("open", err);
	size_t n = eng_ckpt_count(ck);
	uint64_t total = 0;
	for (size_t i = 0; i < n; i++)
		total += eng_ckpt_at(ck, i)->nbytes;
	const double gb = (double)total / 1e9;

	kern_config kc = {.threads = 1};
	kern_ctx *ctx;
	if (ops->create(&kc, &ctx))
		die("backend create", ops->name);
	char desc[256] = "";
	if (ops->describe)
		ops->describe(ctx, desc, sizeof desc);
	kern_queue *q = ops->queue(ctx, KERN_Q_COMPUTE);
	void **dst = calloc(n, sizeof *dst);
	for (size_t i = 0; i < n; i++) {
		const eng_tensor *t = eng_ckpt_at(ck, i);
		if (ops->alloc(ctx, t->nbytes ? t->nbytes : 1, &dst[i]) ||
		    ops->zero(q, dst[i], t->nbytes ? t->nbytes : 1))
			die("device memory for the tensors", t->name);
	}
	/* touched before the clock starts (host memory on the CPU backend:
	 * no first-touch faults in the first path's time) */
	if (ops->sync(q))
		die("sync", NULL);

	/* ---- mmap + upload, one thread ---- */
	if (cold)
		drop_cache(ck);
	double t0 = moor_now();
	for (size_t i = 0; i < n; i++) {
		const eng_tensor *t = eng_ckpt_at(ck, i);
		if (ops->upload(q, dst[i], t->data, t->nbytes))
			die("upload", t->name);
	}
	if (ops->sync(q))
		die("sync", NULL);
	add_row("mmap + upload", 1, "the mapping (pageable)", gb,
		moor_now() - t0);

	/* ---- wload at each thread count, by pread and from the mapping ---- */
	for (int src = 0; src < 2; src++) {
	if ((mm == 0 && src == 1) || (mm == 1 && src == 0))
		continue;
	const char *s = thr;
	while (*s) {
		int th = atoi(s);
		if (th < 1)
			die("--threads", thr);
		eng_wload_cfg wc = {.threads = th,
				    .block = (size_t)(block_mib * (1 << 20)),
				    .direct = direct && !src, .mmap = src};
		eng_wload *w;
		if (eng_wload_new(ops, ctx, &wc, &w))
			die("wload", NULL);
		for (size_t i = 0; i < n; i++)
			if (eng_wload_add(w, dst[i], eng_ckpt_at(ck, i)))
				die("wload add", NULL);
		if (cold)
			drop_cache(ck);
		eng_wload_stats st;
		if (eng_wload_run(w, &st, err))
			die("wload run", err);
		char stg[40];
		snprintf(stg, sizeof stg, "%s, %.0f MiB blocks%s",
			 st.pinned ? "pinned" : "pageable", block_mib,
			 st.direct ? ", O_DIRECT" : "");
		add_row(src ? "wload (mmap)" : "wload (pread)", th, stg,
			(double)st.bytes / 1e9, st.seconds);
		eng_wload_free(w);
		s = strchr(s, ',');
		if (!s)
			break;
		s++;
	}
	}

	/* ---- every byte as the file has it ---- */
	size_t maxb = 0;
	for (size_t i = 0; i < n; i++)
		if (eng_ckpt_at(ck, i)->nbytes > maxb)
			maxb = eng_ckpt_at(ck, i)->nbytes;
	uint8_t *h = malloc(maxb ? maxb : 1);
	int bad = 0;
	for (size_t i = 0; i < n && h; i++) {
		const eng_tensor *t = eng_ckpt_at(ck, i);
		if (!t->nbytes)
			continue;
		if (ops->download(q, h, dst[i], t->nbytes))
			die("download", t->name);
		if (memcmp(h, t->data, t->nbytes)) {
			fprintf(stderr, "bench_load: %s differs from the file\n",
				t->name);
			bad = 1;
		}
	}
	free(h);
	for (size_t i = 0; i < n; i++)
		ops->free(ctx, dst[i]);
	free(dst);

	/* ---- engined's load path ---- */
	if (cold)
		drop_cache(ck);
	eng_opts o = {.grid = 1024, .window = 4096, .threads = 1};
	eng_model *m;
	t0 = moor_now();
	if (eng_model_load(dir, ops, ctx, &o, &m, err))
		die("eng_model_load", err);
	double ml = eng_model_load_seconds(m);
	add_row("eng_model_load", 1,
		ops->wrap_host ? "wrap_host (mapped, no copy)" : "as qwen35.c loads",
		(double)eng_model_weight_bytes(m) / 1e9, ml);
	eng_model_free(m);
	eng_ckpt_close(ck);
	ops->destroy(ctx);

	printf("bench_load: %s on %s; %zu tensors, %.2f GB in %s (%s the "
	       "page cache)\n",
	       ops->name, desc, n, gb, dir, cold ? "dropped from" : "from");
	printf("| path | threads | staging | GB | s | GB/s | vs %.0f GB/s |\n",
	       GOAL_GBS);
	printf("|---|---:|---|---:|---:|---:|---:|\n");
	for (int i = 0; i < nrows; i++) {
		const row *r = &rows[i];
		double r_gbs = r->s > 0 ? r->gb / r->s : 0;
		printf("| %s | %d | %s | %.2f | %.3f | %.2f | %.2fx |\n", r->path,
		       r->threads, r->staging, r->gb, r->s, r_gbs,
		       r_gbs / GOAL_GBS);
	}
	printf("bench_load: %s\n",
	       bad ? "FAIL: a loaded tensor differs from the file"
		   : "every tensor loaded by wload equals the file's bytes");
	return bad;
}
