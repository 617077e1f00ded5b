/* ckpt.c: safetensors checkpoints, single file or sharded, mmapped
 * read-only and validated at open (the rules are in ckpt.h).
 *
 * A safetensors file is: u64 little-endian N, N bytes of JSON header, then
 * the data section; each tensor's data_offsets are relative to the start of
 * the data section (8 + N). */
#include "ckpt.h"

#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "moor.h"

/* Tensor data and the header length are little-endian; so is every host we
 * build for, and eng_tensor_to_f32() memcpy's elements as they are. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
	       "ckpt.c reads little-endian data in place");

#define SINGLE_NAME "model.safetensors"
#define INDEX_NAME "model.safetensors.index.json"
/* The safetensors reference implementation refuses larger headers. */
#define HEADER_MAX (100u << 20)
/* More dims than any real tensor; guards the shape loop. */
#define NDIM_MAX 16

struct shard {
	char *path;	    /* DIR/name */
	const uint8_t *map; /* the whole file, PROT_READ */
	size_t size;	    /* bytes of the file */
	size_t data_start;  /* 8 + N */
};

struct eng_ckpt {
	char *dir;
	char *src; /* what errors about absent tensors name: the single file
		      or the index */
	struct shard *shards;
	size_t nshards;
	eng_tensor *t; /* [n], sorted shard by shard, then by data offset */
	size_t n, cap;
	uint32_t *slot; /* [nslot] open addressing: index + 1, 0 = empty */
	size_t nslot;	/* a power of two >= 2 n */
};

/* ---- small helpers ------------------------------------------------------ */

static char *path_join(const char *dir, const char *name)
{
	size_t a = strlen(dir), b = strlen(name);
	char *p = malloc(a + b + 2);
	if (!p)
		return NULL;
	memcpy(p, dir, a);
	p[a] = '/';
	memcpy(p + a + 1, name, b + 1);
	return p;
}

static uint64_t fnv1a(const char *s)
{
	uint64_t h = 14695981039346656037ull;
	for (; *s; s++) {
		h ^= (uint8_t)*s;
		h *= 1099511628211ull;
	}
	return h;
}

/* Element sizes of the safetensors dtypes; 0: a dtype we cannot size
 * (sub-byte or unknown), whose byte count is then not checked. */
static size_t st_dtype_size(const char *s, int *kdt)
{
	static const struct {
		const char *name;
		int kdt;
		size_t size;
	} tab[] = {
	    {"BF16", KERN_BF16, 2},
	    {"F16", KERN_F16, 2},
	    {"F32", KERN_F32, 4},
	    {"F64", ENG_DTYPE_OTHER, 8},
	    {"I64", ENG_DTYPE_OTHER, 8},
	    {"U64", ENG_DTYPE_OTHER, 8},
	    {"I32", ENG_DTYPE_OTHER, 4},
	    {"U32", ENG_DTYPE_OTHER, 4},
	    {"I16", ENG_DTYPE_OTHER, 2},
	    {"U16", ENG_DTYPE_OTHER, 2},
	    {"I8", ENG_DTYPE_OTHER, 1},
	    {"U8", ENG_DTYPE_OTHER, 1},
	    {"BOOL", ENG_DTYPE_OTHER, 1},
	    {"F8_E4M3", ENG_DTYPE_OTHER, 1},
	    {"F8_E5M2", ENG_DTYPE_OTHER, 1},
	    {"F8_E8M0", ENG_DTYPE_OTHER, 1},
	    {"C64", ENG_DTYPE_OTHER, 8},
	};
	for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
		if (!strcmp(s, tab[i].name)) {
			*kdt = tab[i].kdt;
			return tab[i].size;
		}
	*kdt = ENG_DTYPE_OTHER;
	return 0;
}

/* "[a, b, c]" of the first min(ndim, 4) dims, ", ..." beyond. */
static void fmt_shape(char *buf, size_t len, int ndim, const int64_t *shape)
{
	size_t o = 0;
	int k = ndim < ENG_MAX_DIMS ? ndim : ENG_MAX_DIMS;
	o += (size_t)snprintf(buf + o, len - o, "[");
	for (int i = 0; i < k && o < len; i++)
		o += (size_t)snprintf(buf + o, len - o, "%s%" PRId64,
				      i ? ", " : "", shape[i]);
	if (ndim > k && o < len)
		o +=
		    (size_t)snprintf(buf + o, len - o, ", ... (%d dims)", ndim);
	if (o < len)
		snprintf(buf + o, len - o, "]");
}

/* Opens and reads a JSON file; -errno if it cannot be opened,
 * MOOR_EFORMAT with jansson's position if it does not parse. */
static int load_json(const char *path, json_t **out, char *err)
{
	*out = NULL;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		moor_errf(err, "%s: %s", path, strerror(e));
		return -e;
	}
	json_error_t je;
	json_t *j = json_loadfd(fd, JSON_REJECT_DUPLICATES, &je);
	close(fd);
	if (!j) {
		moor_errf(err, "%s: malformed JSON: %s (line %d, column %d)",
			  path, je.text, je.line, je.column);
		return MOOR_EFORMAT;
	}
	*out = j;
	return 0;
}

/* ---- one shard ---------------------------------------------------------- */

static int push_tensor(eng_ckpt *c, const eng_tensor *t)
{
	if (c->n == c->cap) {
		size_t cap = c->cap ? 2 * c->cap : 256;
		eng_tensor *p = realloc(c->t, cap * sizeof *p);
		if (!p)
			return -ENOMEM;
		c->t = p;
		c->cap = cap;
	}
	c->t[c->n++] = *t;
	return 0;
}

static void free_tensor_strings(eng_tensor *t)
{
	free((char *)t->name);
	free((char *)t->dtype_name);
}

/* Validates one header entry and fills t (its strings malloc'd). */
static int parse_entry(const struct shard *sh, const char *key, json_t *v,
		       eng_tensor *t, char *err)
{
	const char *path = sh->path;
	memset(t, 0, sizeof *t);
	if (!json_is_object(v)) {
		moor_errf(err, "%s: tensor %s: header entry is not an object",
			  path, key);
		return MOOR_EFORMAT;
	}
	json_t *jd = json_object_get(v, "dtype");
	json_t *js = json_object_get(v, "shape");
	json_t *jo = json_object_get(v, "data_offsets");
	if (!json_is_string(jd) || !json_is_array(js) || !json_is_array(jo)) {
		moor_errf(err,
			  "%s: tensor %s: header entry needs dtype (string), "
			  "shape and data_offsets (arrays)",
			  path, key);
		return MOOR_EFORMAT;
	}
	size_t ndim = json_array_size(js);
	if (ndim > NDIM_MAX) {
		moor_errf(err, "%s: tensor %s: %zu dims", path, key, ndim);
		return MOOR_EFORMAT;
	}
	uint64_t numel = 1;
	int64_t shape[ENG_MAX_DIMS] = {0};
	for (size_t i = 0; i < ndim; i++) {
		json_t *d = json_array_get(js, i);
		if (!json_is_integer(d) || json_integer_value(d) < 0) {
			moor_errf(err,
				  "%s: tensor %s: shape entry %zu is not an "
				  "integer >= 0",
				  path, key, i);
			return MOOR_EFORMAT;
		}
		uint64_t di = (uint64_t)json_integer_value(d);
		if (di && numel > (uint64_t)INT64_MAX / di) {
			moor_errf(err, "%s: tensor %s: shape overflows", path,
				  key);
			return MOOR_EFORMAT;
		}
		numel *= di;
		if (i < ENG_MAX_DIMS)
			shape[i] = (int64_t)di;
	}
	json_t *jb = json_array_get(jo, 0), *je = json_array_get(jo, 1);
	if (json_array_size(jo) != 2 || !json_is_integer(jb) ||
	    !json_is_integer(je) || json_integer_value(jb) < 0 ||
	    json_integer_value(je) < json_integer_value(jb)) {
		moor_errf(err,
			  "%s: tensor %s: data_offsets must be [begin, end] "
			  "with 0 <= begin <= end",
			  path, key);
		return MOOR_EFORMAT;
	}
	uint64_t b = (uint64_t)json_integer_value(jb);
	uint64_t e = (uint64_t)json_integer_value(je);
	uint64_t avail = sh->size - sh->data_start;
	if (e > avail) {
		moor_errf(err,
			  "%s: tensor %s: data_offsets [%" PRIu64 ", %" PRIu64
			  "] run past the end of the file (data section of "
			  "%" PRIu64 " bytes)",
			  path, key, b, e, avail);
		return MOOR_ETRUNC;
	}
	const char *ds = json_string_value(jd);
	int kdt;
	size_t es = st_dtype_size(ds, &kdt);
	if (es && (numel > UINT64_MAX / es || e - b != numel * es)) {
		char sb[128];
		fmt_shape(sb, sizeof sb, (int)ndim, shape);
		moor_errf(err,
			  "%s: tensor %s: data_offsets [%" PRIu64 ", %" PRIu64
			  "] hold %" PRIu64 " bytes but shape %s of %s needs "
			  "%" PRIu64,
			  path, key, b, e, e - b, sb, ds, numel * es);
		return MOOR_EFORMAT;
	}
	t->name = strdup(key);
	t->dtype_name = strdup(ds);
	if (!t->name || !t->dtype_name) {
		free_tensor_strings(t);
		return -ENOMEM;
	}
	t->dtype = kdt;
	t->ndim = (int)ndim;
	memcpy(t->shape, shape, sizeof shape);
	t->data = sh->map + sh->data_start + b;
	t->offset = sh->data_start + b;
	t->nbytes = (size_t)(e - b);
	t->file = sh->path;
	return 0;
}

static int cmp_by_data(const void *a, const void *b)
{
	const eng_tensor *x = a, *y = b;
	const uint8_t *px = x->data, *py = y->data;
	if (px != py)
		return px < py ? -1 : 1;
	if (x->nbytes != y->nbytes)
		return x->nbytes < y->nbytes ? -1 : 1;
	return strcmp(x->name, y->name);
}

/* Maps shard si, validates its header and appends its tensors. */
static int shard_load(eng_ckpt *c, size_t si, const char *named_by, char *err)
{
	struct shard *sh = &c->shards[si];
	const char *path = sh->path;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		if (named_by)
			moor_errf(err, "%s: %s (a shard named by %s)", path,
				  strerror(e), named_by);
		else
			moor_errf(err, "%s: %s", path, strerror(e));
		return -e;
	}
	struct stat st;
	if (fstat(fd, &st) < 0) {
		int e = errno;
		close(fd);
		moor_errf(err, "%s: fstat: %s", path, strerror(e));
		return -e;
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		moor_errf(err, "%s: not a regular file", path);
		return MOOR_EFORMAT;
	}
	size_t size = (size_t)st.st_size;
	if (size < 8) {
		close(fd);
		moor_errf(err,
			  "%s: %zu bytes, shorter than the 8-byte header "
			  "length",
			  path, size);
		return MOOR_ETRUNC;
	}
	void *m = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
	int e = errno;
	close(fd);
	if (m == MAP_FAILED) {
		moor_errf(err, "%s: mmap: %s", path, strerror(e));
		return -e;
	}
	sh->map = m;
	sh->size = size;

	uint64_t hlen = 0;
	for (int i = 7; i >= 0; i--)
		hlen = hlen << 8 | sh->map[i];
	if (hlen > size - 8) {
		moor_errf(err,
			  "%s: header length %" PRIu64
			  " exceeds the %zu bytes after it",
			  path, hlen, size - 8);
		return MOOR_ETRUNC;
	}
	if (hlen < 2 || hlen > HEADER_MAX) {
		moor_errf(err, "%s: header length %" PRIu64 " out of range",
			  path, hlen);
		return MOOR_EFORMAT;
	}
	sh->data_start = 8 + (size_t)hlen;

	json_error_t je;
	json_t *h = json_loadb((const char *)sh->map + 8, (size_t)hlen,
			       JSON_REJECT_DUPLICATES, &je);
	if (!h) {
		moor_errf(err,
			  "%s: malformed header JSON: %s (line %d, column "
			  "%d)",
			  path, je.text, je.line, je.column);
		return MOOR_EFORMAT;
	}
	if (!json_is_object(h)) {
		json_decref(h);
		moor_errf(err, "%s: header is not a JSON object", path);
		return MOOR_EFORMAT;
	}
	size_t first = c->n;
	const char *key;
	json_t *v;
	int rc = 0;
	json_object_foreach(h, key, v)
	{
		if (!strcmp(key, "__metadata__"))
			continue;
		eng_tensor t;
		rc = parse_entry(sh, key, v, &t, err);
		if (rc == 0) {
			rc = push_tensor(c, &t);
			if (rc)
				free_tensor_strings(&t);
		}
		if (rc)
			break;
	}
	json_decref(h);
	if (rc) {
		if (rc == -ENOMEM)
			moor_errf(err, "%s: out of memory", path);
		return rc;
	}
	/* Fixed order; then overlap: each non-empty tensor must begin at or
	 * after the end of the one before it. */
	if (c->n > first) /* a file of no tensors: c->t may be NULL */
		qsort(c->t + first, c->n - first, sizeof *c->t, cmp_by_data);
	const uint8_t *end = NULL;
	const char *prev = NULL;
	for (size_t i = first; i < c->n; i++) {
		const eng_tensor *t = &c->t[i];
		if (!t->nbytes)
			continue;
		const uint8_t *p = t->data;
		if (end && p < end) {
			moor_errf(err, "%s: tensors %s and %s overlap", path,
				  prev, t->name);
			return MOOR_EFORMAT;
		}
		end = p + t->nbytes;
		prev = t->name;
	}
	return 0;
}

/* ---- the name index ----------------------------------------------------- */

static int build_index(eng_ckpt *c, char *err)
{
	size_t ns = 16;
	while (ns < 2 * c->n)
		ns *= 2;
	c->slot = calloc(ns, sizeof *c->slot);
	if (!c->slot) {
		moor_errf(err, "%s: out of memory", c->dir);
		return -ENOMEM;
	}
	c->nslot = ns;
	for (size_t i = 0; i < c->n; i++) {
		size_t s = (size_t)fnv1a(c->t[i].name) & (ns - 1);
		while (c->slot[s]) {
			const eng_tensor *o = &c->t[c->slot[s] - 1];
			if (!strcmp(o->name, c->t[i].name)) {
				moor_errf(err, "%s: tensor %s is also in %s",
					  c->t[i].file, c->t[i].name, o->file);
				return MOOR_EFORMAT;
			}
			s = (s + 1) & (ns - 1);
		}
		c->slot[s] = (uint32_t)(i + 1);
	}
	return 0;
}

const eng_tensor *eng_ckpt_find(const eng_ckpt *c, const char *name)
{
	if (!c || !name || !c->nslot)
		return NULL;
	size_t s = (size_t)fnv1a(name) & (c->nslot - 1);
	while (c->slot[s]) {
		const eng_tensor *t = &c->t[c->slot[s] - 1];
		if (!strcmp(t->name, name))
			return t;
		s = (s + 1) & (c->nslot - 1);
	}
	return NULL;
}

/* ---- open / close ------------------------------------------------------- */

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int add_shard(eng_ckpt *c, const char *name)
{
	struct shard *sh = &c->shards[c->nshards];
	memset(sh, 0, sizeof *sh);
	sh->path = path_join(c->dir, name);
	if (!sh->path)
		return -ENOMEM;
	c->nshards++;
	return 0;
}

static int open_sharded(eng_ckpt *c, char *err)
{
	json_t *idx;
	int rc = load_json(c->src, &idx, err);
	if (rc)
		return rc;
	json_t *wm = json_object_get(idx, "weight_map");
	const char **names = NULL;
	size_t nn = 0;
	if (!json_is_object(wm) || !json_object_size(wm)) {
		moor_errf(err, "%s: no weight_map object", c->src);
		rc = MOOR_EFORMAT;
		goto out;
	}
	names = malloc(json_object_size(wm) * sizeof *names);
	if (!names) {
		rc = -ENOMEM;
		goto out;
	}
	const char *key;
	json_t *v;
	json_object_foreach(wm, key, v)
	{
		const char *s = json_string_value(v);
		if (!s || !*s || strchr(s, '/') || !strcmp(s, ".") ||
		    !strcmp(s, "..")) {
			moor_errf(err,
				  "%s: weight_map entry for %s is not a file "
				  "name in the directory",
				  c->src, key);
			rc = MOOR_EFORMAT;
			goto out;
		}
		names[nn++] = s;
	}
	qsort(names, nn, sizeof *names, cmp_str);
	size_t nu = 0;
	for (size_t i = 0; i < nn; i++)
		if (!nu || strcmp(names[nu - 1], names[i]))
			names[nu++] = names[i];
	c->shards = calloc(nu, sizeof *c->shards);
	if (!c->shards) {
		rc = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < nu; i++) {
		if ((rc = add_shard(c, names[i])))
			goto out;
		if ((rc = shard_load(c, i, c->src, err)))
			goto out;
	}
	if ((rc = build_index(c, err)))
		goto out;
	json_object_foreach(wm, key, v)
	{
		const eng_tensor *t = eng_ckpt_find(c, key);
		const char *f = t ? strrchr(t->file, '/') + 1 : NULL;
		if (!t || strcmp(f, json_string_value(v))) {
			moor_errf(err,
				  "%s: tensor %s is mapped to shard %s, which "
				  "does not contain it",
				  c->src, key, json_string_value(v));
			rc = MOOR_EMISSING;
			goto out;
		}
	}
out:
	if (rc == -ENOMEM)
		moor_errf(err, "%s: out of memory", c->src);
	free(names);
	json_decref(idx);
	return rc;
}

static int open_single(eng_ckpt *c, char *err)
{
	c->shards = calloc(1, sizeof *c->shards);
	if (!c->shards)
		return -ENOMEM;
	int rc = add_shard(c, SINGLE_NAME);
	if (!rc)
		rc = shard_load(c, 0, NULL, err);
	if (!rc)
		rc = build_index(c, err);
	return rc;
}

int eng_ckpt_open(const char *dir, eng_ckpt **out, char *err)
{
	*out = NULL;
	eng_ckpt *c = calloc(1, sizeof *c);
	if (!c || !(c->dir = strdup(dir))) {
		free(c);
		moor_errf(err, "%s: out of memory", dir);
		return -ENOMEM;
	}
	int rc;
	struct stat st;
	char *single = path_join(dir, SINGLE_NAME);
	char *index = path_join(dir, INDEX_NAME);
	if (!single || !index) {
		free(single);
		free(index);
		rc = -ENOMEM;
		moor_errf(err, "%s: out of memory", dir);
		goto fail;
	}
	if (stat(single, &st) == 0) {
		c->src = single;
		free(index);
		rc = open_single(c, err);
	} else if (stat(index, &st) == 0) {
		c->src = index;
		free(single);
		rc = open_sharded(c, err);
	} else {
		free(single);
		free(index);
		if (stat(dir, &st) < 0) {
			rc = -errno;
			moor_errf(err, "%s: %s", dir, strerror(-rc));
		} else if (!S_ISDIR(st.st_mode)) {
			rc = -ENOTDIR;
			moor_errf(err, "%s: not a directory", dir);
		} else {
			rc = -ENOENT;
			moor_errf(err, "%s: neither %s nor %s exists", dir,
				  SINGLE_NAME, INDEX_NAME);
		}
	}
	if (rc == -ENOMEM)
		moor_errf(err, "%s: out of memory", dir);
	if (rc)
		goto fail;
	*out = c;
	return 0;
fail:
	eng_ckpt_close(c);
	return rc;
}

void eng_ckpt_close(eng_ckpt *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->n; i++)
		free_tensor_strings(&c->t[i]);
	free(c->t);
	free(c->slot);
	for (size_t i = 0; i < c->nshards; i++) {
		if (c->shards[i].map)
			munmap((void *)c->shards[i].map, c->shards[i].size);
		free(c->shards[i].path);
	}
	free(c->shards);
	free(c->src);
	free(c->dir);
	free(c);
}

/* ---- lookups ------------------------------------------------------------ */

int eng_ckpt_get(const eng_ckpt *c, const char *name, int ndim,
		 const int64_t *shape, const eng_tensor **out, char *err)
{
	MOOR_ASSERT(c && name && out && (shape || !ndim));
	MOOR_ASSERT(ndim >= 0 && ndim <= ENG_MAX_DIMS);
	*out = NULL;
	const eng_tensor *t = eng_ckpt_find(c, name);
	if (!t) {
		moor_errf(err, "%s: tensor %s not found", c->src, name);
		return MOOR_EMISSING;
	}
	if (t->dtype == ENG_DTYPE_OTHER) {
		moor_errf(err,
			  "%s: tensor %s: dtype %s is not supported (BF16, "
			  "F16, F32)",
			  t->file, name, t->dtype_name);
		return MOOR_EDTYPE;
	}
	int ok = t->ndim == ndim;
	for (int i = 0; ok && i < ndim; i++)
		ok = t->shape[i] == shape[i];
	if (!ok) {
		char got[128], want[128];
		fmt_shape(got, sizeof got, t->ndim, t->shape);
		fmt_shape(want, sizeof want, ndim, shape);
		moor_errf(err, "%s: tensor %s: shape %s, expected %s", t->file,
			  name, got, want);
		return MOOR_ESHAPE;
	}
	*out = t;
	return 0;
}

size_t eng_ckpt_count(const eng_ckpt *c)
{
	return c ? c->n : 0;
}

const eng_tensor *eng_ckpt_at(const eng_ckpt *c, size_t i)
{
	return c && i < c->n ? &c->t[i] : NULL;
}

const char *eng_ckpt_dir(const eng_ckpt *c)
{
	return c->dir;
}

int64_t eng_tensor_numel(const eng_tensor *t)
{
	int64_t n = 1;
	for (int i = 0; i < t->ndim && i < ENG_MAX_DIMS; i++)
		n *= t->shape[i];
	return n;
}

int eng_tensor_to_f32(const eng_tensor *t, float *dst, size_t n)
{
	if (t->dtype == ENG_DTYPE_OTHER)
		return MOOR_EDTYPE;
	if (t->ndim > ENG_MAX_DIMS || (int64_t)n != eng_tensor_numel(t) ||
	    n * kern_dtype_size(t->dtype) != t->nbytes)
		return MOOR_ERANGE;
	const uint8_t *p = t->data;
	for (size_t i = 0; i < n; i++) {
		if (t->dtype == KERN_F32) {
			memcpy(&dst[i], p + 4 * i, 4);
		} else {
			uint16_t h;
			memcpy(&h, p + 2 * i, 2);
			dst[i] = t->dtype == KERN_BF16 ? moor_bf16_to_f32(h)
						       : moor_f16_to_f32(h);
		}
	}
	return 0;
}
