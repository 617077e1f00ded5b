/* spill_files.h: the spill tests' look at an entry's files on the disk:
 * the entry a drain wrote, its files by name, and two entries compared
 * byte for byte, the toy conversation they drain and a copy of its live
 * bytes (test_spill_direct, test_spill_two_stages, test_spill_sums_in_place,
 * test_spill_reader). Include after toy.h. */
#ifndef SPILL_FILES_H
#define SPILL_FILES_H

#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* dir/sessions/<the drained entry>, the one DIR/sessions/resident names */
static inline void entry_dir(const char *dir, char *out, size_t n)
{
	char p[400], rn[17] = "";
	snprintf(p, sizeof p, "%s/sessions/resident", dir);
	int fd = open(p, O_RDONLY);
	REQUIRE(fd >= 0 && read(fd, rn, 16) == 16, "%s", p);
	close(fd);
	snprintf(out, n, "%s/sessions/%s", dir, rn);
}

/* The whole file (malloc'd, *n bytes), or NULL when it is not there. */
static inline uint8_t *slurp(const char *path, uint64_t *n)
{
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return NULL;
	struct stat st;
	REQUIRE(fstat(fd, &st) == 0, "stat %s", path);
	uint8_t *b = malloc((size_t)st.st_size + 1);
	REQUIRE(b && read(fd, b, (size_t)st.st_size) == st.st_size, "read %s",
		path);
	close(fd);
	*n = (uint64_t)st.st_size;
	return b;
}

/* The names of the files of entry directory e, sorted; how many. */
static inline int list_files(const char *e, char names[][32], int max)
{
	DIR *d = opendir(e);
	REQUIRE(d, "opendir %s", e);
	struct dirent *de;
	int n = 0;
	while ((de = readdir(d)))
		if (de->d_name[0] != '.') {
			REQUIRE(n < max, "too many files");
			snprintf(names[n++], 32, "%.31s", de->d_name);
		}
	closedir(d);
	qsort(names, (size_t)n, 32,
	      (int (*)(const void *, const void *))strcmp);
	return n;
}

/* Every file of the entries the drains into da and db wrote equal (the
 * same names); the manifest but saved_at (its spill_man field after the
 * 104-byte header) and its closing sum, which covers it. Returns the
 * count of data files (all but the manifest). */
static inline int same_files(const char *da, const char *db, const char *what)
{
	char ea[400], eb[400], na_[32][32], nb_[32][32];
	static char pa[2048], pb[2048];
	entry_dir(da, ea, sizeof ea);
	entry_dir(db, eb, sizeof eb);
	int n = list_files(ea, na_, 32), m = list_files(eb, nb_, 32);
	CHECK(n == m, "%s: %d files and %d", what, n, m);
	int data = 0;
	for (int i = 0; i < n && i < m; i++) {
		CHECK(!strcmp(na_[i], nb_[i]), "%s: file %s and %s", what,
		      na_[i], nb_[i]);
		snprintf(pa, sizeof pa, "%s/%s", ea, na_[i]);
		snprintf(pb, sizeof pb, "%s/%s", eb, nb_[i]);
		uint64_t la = 0, lb = 0;
		uint8_t *a = slurp(pa, &la), *b = slurp(pb, &lb);
		REQUIRE(a && b, "%s: %s in both entries", what, na_[i]);
		if (!strcmp(na_[i], "manifest")) {
			REQUIRE(la == lb && la > 184, "%s: manifests' sizes",
				what);
			memset(a + 104 + 56, 0, 8); /* saved_at */
			memset(b + 104 + 56, 0, 8);
			la -= 8;
			lb -= 8;
		} else {
			data++;
		}
		CHECK(la == lb && !memcmp(a, b, la),
		      "%s: %s differs (%llu and %llu bytes)", what, na_[i],
		      (unsigned long long)la, (unsigned long long)lb);
		free(a);
		free(b);
	}
	return data;
}

/* The spill alone (no disk tier), codec on or off on 2 threads, in dir;
 * arenas named after tag and name. */
static inline void spill_cfg(cache_cfg *cfg, const char *tag, const char *dir,
		      const char *name, int codec)
{
	toy_cfg_disk(cfg, tag, name, dir);
	cfg->disk_on = 0; /* the spill alone */
	cfg->spill_codec = codec;
	cfg->codec_threads = 2;
}

/* A cache in dir (spill_cfg's, name "a") that ran a turn of the ntok ids
 * at grid g (valid ntok + 3). */
static inline void spill_conv(toy_env *e, const char *tag, const char *dir,
		       int codec, const int32_t *ids, uint64_t ntok, uint32_t g)
{
	cache_cfg cfg;
	spill_cfg(&cfg, tag, dir, "a", codec);
	toy_open(e, &cfg, 4096, g);
	toy_turn t;
	REQUIRE(toy_run(e, ids, ntok, "s", 4, &t, 0, "turn") == 0, "turn");
	REQUIRE(e->c->valid == ntok + 3, "valid %llu",
		(unsigned long long)e->c->valid);
}

/* A copy of e's live sections and rows (toy_seq_free): the truth a
 * read-back is compared with. */
static inline void spill_seq_take(const toy_env *e, toy_seq *out)
{
	toy_seq_alloc(e->lay, out);
	memcpy(out->sec[0], e->s.sec[0], TOY_S0);
	memcpy(out->sec[1], e->s.sec[1], TOY_S1);
	for (int i = 0; i < 3; i++) {
		uint64_t outer, inner;
		toy_geom(&e->lay->view[i], &outer, &inner);
		memcpy(out->view[i], e->s.view[i],
		       outer * inner * e->lay->view[i].elt * e->lay->window);
	}
}

#endif
