/* fingerprint.c: the engine's fingerprint (serve.h: eng_serve_fingerprint),
 * what cached compares before it hands an engine the state an earlier one
 * left: two XXH3-128 digests of one length-prefixed stream. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "moor.h"
#include "serve.h"

#ifndef MOOR_VERSION
#define MOOR_VERSION "unknown"
#endif

typedef struct fp_state {
	XXH3_state_t *a, *b;
} fp_state;

static void fp_put(fp_state *f, const void *p, size_t n)
{
	XXH3_128bits_update(f->a, p, n);
	XXH3_128bits_update(f->b, p, n);
}

/* A length-prefixed field, so that two fields never run together. */
static void fp_field(fp_state *f, const void *p, size_t n)
{
	uint64_t len = n;
	fp_put(f, &len, sizeof len);
	fp_put(f, p, n);
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int fp_file(fp_state *f, const char *path, int header_only, char *err)
{
	FILE *fp = fopen(path, "rb");
	if (!fp) {
		int e = -errno;
		moor_errf(err, "%s: %s", path, strerror(errno));
		return e;
	}
	int rc = 0;
	uint64_t want = UINT64_MAX;
	if (header_only) {
		uint8_t h8[8];
		if (fread(h8, 1, 8, fp) != 8) {
			moor_errf(err, "%s: shorter than a safetensors header",
				  path);
			fclose(fp);
			return MOOR_ETRUNC;
		}
		want = 0;
		for (int i = 7; i >= 0; i--)
			want = want << 8 | h8[i];
		if (want > (100u << 20)) {
			moor_errf(err, "%s: header of %llu bytes", path,
				  (unsigned long long)want);
			fclose(fp);
			return MOOR_EFORMAT;
		}
		fp_put(f, h8, 8);
	}
	char buf[65536];
	uint64_t got = 0;
	while (got < want) {
		size_t k = sizeof buf;
		if (want - got < k)
			k = (size_t)(want - got);
		size_t r = fread(buf, 1, k, fp);
		if (r == 0)
			break;
		fp_put(f, buf, r);
		got += r;
	}
	if (ferror(fp)) {
		moor_errf(err, "%s: read failed", path);
		rc = -EIO;
	} else if (header_only && got != want) {
		moor_errf(err, "%s: header truncated", path);
		rc = MOOR_ETRUNC;
	}
	fclose(fp);
	return rc;
}

/* The dummy weights' stand-in for the checkpoint files: their seed. */
static void fp_dummy(fp_state *f, uint64_t seed)
{
	static const char w[] = "dummy";
	fp_field(f, w, sizeof w);
	fp_field(f, &seed, sizeof seed);
}

int eng_serve_fingerprint(const char *model_dir, const eng_opts *opts,
			  int grid, const char *backend, uint8_t out[32],
			  char *err)
{
	fp_state f = {XXH3_createState(), XXH3_createState()};
	char **names = NULL;
	size_t nn = 0, cap = 0;
	int rc = -ENOMEM;
	if (!f.a || !f.b)
		goto done;
	XXH3_128bits_reset_withSeed(f.a, 0x6d6f6f72u);	      /* "moor" */
	XXH3_128bits_reset_withSeed(f.b, 0x66703176ull << 8); /* "fp1v" */
	static const char tag[] = "moor fingerprint v1";
	fp_field(&f, tag, sizeof tag);
	char path[4096];
	snprintf(path, sizeof path, "%s/config.json", model_dir);
	rc = fp_file(&f, path, 0, err);
	if (rc)
		goto done;
	if (opts && opts->load_format == ENG_LOAD_DUMMY) {
		fp_dummy(&f, opts->seed);
		goto tail;
	}
	DIR *d = opendir(model_dir);
	if (!d) {
		rc = -errno;
		moor_errf(err, "%s: %s", model_dir, strerror(errno));
		goto done;
	}
	struct dirent *e;
	while ((e = readdir(d))) {
		size_t l = strlen(e->d_name);
		if (l < 12 || strcmp(e->d_name + l - 12, ".safetensors"))
			continue;
		if (nn == cap) {
			cap = cap ? 2 * cap : 8;
			char **n2 = realloc(names, cap * sizeof *names);
			if (!n2) {
				rc = -ENOMEM;
				closedir(d);
				goto done;
			}
			names = n2;
		}
		if (!(names[nn] = strdup(e->d_name))) {
			rc = -ENOMEM;
			closedir(d);
			goto done;
		}
		nn++;
	}
	closedir(d);
	if (nn == 0) {
		moor_errf(err, "%s: no .safetensors file", model_dir);
		rc = MOOR_EMISSING;
		goto done;
	}
	qsort(names, nn, sizeof *names, name_cmp);
	for (size_t i = 0; i < nn; i++) {
		fp_field(&f, names[i], strlen(names[i]));
		snprintf(path, sizeof path, "%s/%s", model_dir, names[i]);
		rc = fp_file(&f, path, 1, err);
		if (rc)
			goto done;
	}
tail:;
	uint32_t g = (uint32_t)grid, abi = KERN_ABI_VERSION;
	fp_field(&f, &g, sizeof g);
	fp_field(&f, backend, strlen(backend));
	fp_field(&f, &abi, sizeof abi);
	fp_field(&f, MOOR_VERSION, strlen(MOOR_VERSION));
	fp_field(&f, __VERSION__, strlen(__VERSION__)); /* the compiler */
	XXH128_canonical_t ca, cb;
	XXH128_canonicalFromHash(&ca, XXH3_128bits_digest(f.a));
	XXH128_canonicalFromHash(&cb, XXH3_128bits_digest(f.b));
	memcpy(out, ca.digest, 16);
	memcpy(out + 16, cb.digest, 16);
	rc = 0;
done:
	for (size_t i = 0; i < nn; i++)
		free(names[i]);
	free(names);
	XXH3_freeState(f.a);
	XXH3_freeState(f.b);
	return rc;
}
