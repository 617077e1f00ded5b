/* spill.c: the session spill: whole conversations on the NVMe.
 *
 * An entry is one conversation: the rows [0, valid) of every view, the end
 * anchor, the newest 4 grid anchors, the token ids, taint and the session
 * key. These are the bytes that were in the engine, not a cold prefill's,
 * so a restore is held to the gate the rows were held to in RAM (the taint
 * line travels with them): the next turn resumes at the end anchor and
 * writes what it would have written had the rows never left.
 *
 * On disk, under DIR/sessions/<entry id>/ (the id: the session key's
 * hash, else the hash of the conversation's first grid chunk):
 *   r<j>       block j: rows [j * 1024, min(valid, (j + 1) * 1024)) of
 *              every view, a compact rows buffer (window = its rows);
 *   a<line>    a grid anchor's sections, in the layout's order;
 *   end        the end anchor's sections;
 *   manifest   written last, removed first: the layout's digest, the
 *              fingerprint, valid, taint, the end's line, the session key,
 *              the ids, and per block and anchor the two sums of every
 *              buffer (dfile_sum2); an XXH3 of the whole manifest at its
 *              end.
 * Every data file starts with a spill_hdr (magic, version, kind, index,
 * rows, the layout digest, the fingerprint) and its sums; a block or
 * anchor is good when its header says what the manifest says, its sums are
 * the manifest's and the sums of its bytes are again the same.
 *
 * Crash safety: a save writes each file as NAME.new beside the entry's
 * files; once every one has landed it removes the manifest, renames them
 * into place and writes the manifest last (save_commit). A save that
 * fails before (a write, ENOSPC, the floor, memory) leaves the entry on
 * the disk as it was and removes its .new files; one that fails after
 * costs the entry. An entry without a manifest is a write that did not
 * finish, deleted at the next open with every .tmp and .new; a .new beside
 * a manifest is a save that did not reach its commit, deleted at the
 * next open or save. An entry of another
 * fingerprint or layout is deleted at the attach of an engine that cannot
 * read it. A file that fails its check costs the entry (deleted, logged),
 * never an answer: the conversation prefills cold.
 *
 * Incremental by content: a save first reads the entry's manifest; a block
 * whose rows, ids and sums equal the manifest's and whose file is there is
 * not written again, nor an anchor whose sums equal its file's; so the
 * drain of a conversation that did not move writes only the manifest.
 *
 * Two stages: a save encodes a file (block or anchor) while a writer
 * thread of its own writes the one before (the section "the save's two
 * stages" says who owns what); the files and their order are the serial
 * save's. A read-back the other way round: a reader thread of its own
 * reads the next file while this one is checked, decoded and copied in
 * (the section "read back: a reader and the checks"); the checks, the
 * copies and their order are the serial read-back's. The sums of bytes on
 * the host and the codec run on the spill's pool (codec_threads), and so
 * do the copies on a host-mapped arena (the section "host copies on the
 * pool").
 *
 * DIR/sessions/resident names the entry the drain wrote for the resident
 * conversation; the attach of an engine with the same fingerprint and
 * layout reads it back into the live buffers (cache_hello), so a planned
 * restart of cached resumes the next turn at its end anchor.
 *
 * Budgets: --session-spill-gb (64) over every entry, least recently used
 * first; an entry unused for --session-spill-hours (48) goes at the open
 * and at every save (spill_budget). Under the disk tier's free-space floor
 * (--disk-cache-min-free-gb, 50), as the seed puts it: a save that would
 * take the file system's free space under it removes the least recently
 * used entries first when they make the room, else it is not made
 * (floor_room; each file is checked again before it is written).
 *
 * Where the bytes are: the spill reads and writes the device arena only
 * through cached's mover (c->mv), one bounded host staging buffer at a
 * time (a block: 1,024 rows of every view; an anchor: its sections). On
 * the CPU backend the device arena is host memory: the blocks go through
 * the memcpy mover as before and an anchor's sections are read in place
 * (no extra copy). On a CUDA device arena (cfg.dev_cuda >= 0) the CUDA
 * mover's copies are asynchronous on its stream, so the spill syncs
 * (cache_sync) after every copy into the staging buffer before the host
 * reads it (the sums, the codec, the file), and after every copy out of it
 * before the buffer is filled again or freed; the read-back ends synced,
 * so the rows are in place before HELLO_OK hands them to the engine. A
 * save checks a block or anchor the old manifest holds by the mover's
 * sum2 where its bytes are, and copies it off the device only when it
 * changed (the section "the sums where the bytes are"); the read-back
 * sums what it read, on the host.
 *
 * The I/O path: a block, anchor or end file is written with O_DIRECT
 * where the file system takes it (dfile_write_direct: one write of its
 * header, sums and data, laid out back to back in the slot's
 * 4 KiB-aligned buffer and padded to 4 KiB, the padding cut off again
 * before the fdatasync), else buffered with its pages dropped; it is read
 * back whole in one O_DIRECT read (dfile_read_direct). The files are the
 * buffered path's byte for byte, so an entry an older cached wrote reads
 * back as it was. MOOR_SPILL_DIRECT=0 (a measuring switch) writes them
 * buffered, a write per part, as before. The manifest and the resident
 * name are small and stay buffered.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "cache_int.h"
#include "codec.h"
#include "dfile.h"
#include "moor.h"

#define SPILL_MAGIC 0x314c5053524f4f4dull /* "MOORSPL1" */
#define SPILL_VERSION 3u
#define SPILL_BLK 1024u
#define SPILL_ANCHORS 4u

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
	       "the spill's files are little-endian, written as the host's");

enum { SF_MANIFEST = 1, SF_BLOCK = 2, SF_ANCHOR = 3, SF_END = 4 };

typedef struct spill_hdr {
	uint64_t magic;
	uint32_t version, kind;
	uint64_t index;	 /* block index; anchor line; end: its line */
	uint64_t rows;	 /* block rows; 0 for an anchor */
	uint64_t digest; /* the layout's (spill_layout_digest) */
	uint64_t n_sums; /* u64 sums that follow the header */
	uint64_t data;	 /* bytes after the sums (encoded, with codec) */
	uint64_t raw;	 /* the decoded data's bytes */
	uint32_t codec;	 /* 0: raw; 1: codec.h's planes + zstd frames */
	uint32_t pad0;
	uint8_t fp[32];
} spill_hdr;
_Static_assert(sizeof(spill_hdr) == 104, "spill_hdr is 104 bytes");

typedef struct spill_man {
	uint64_t valid, taint, end_len, end_taint;
	uint64_t n_blk, n_anc, session_len, saved_at; /* unix seconds */
	uint64_t n_mk; /* the rows' marks (cache_mark: 24 bytes each) */
} spill_man;
_Static_assert(sizeof(spill_man) == 72, "spill_man is 72 bytes");
_Static_assert(sizeof(cache_mark) == 24, "a mark is 24 bytes on disk");

/* ---- the layout's digest: what a stored byte's meaning depends on ---- */

uint64_t cache_tier_layout_digest(const cache_layout *l, uint32_t v)
{
	XXH3_state_t *s = XXH3_createState();
	MOOR_ASSERT(s);
	XXH3_64bits_reset(s);
	XXH3_64bits_update(s, &v, 4);
	XXH3_64bits_update(s, &l->n_sections, 4);
	XXH3_64bits_update(s, &l->n_views, 4);
	XXH3_64bits_update(s, &l->grid, 4);
	for (uint32_t i = 0; i < l->n_sections; i++) {
		XXH3_64bits_update(s, l->sec[i].name,
				   strnlen(l->sec[i].name, CACHE_NAME_MAX));
		XXH3_64bits_update(s, &l->sec[i].layer, 4);
		XXH3_64bits_update(s, &l->sec[i].bytes, 8);
	}
	for (uint32_t i = 0; i < l->n_views; i++) {
		const cache_view *w = &l->view[i];
		XXH3_64bits_update(s, w->name,
				   strnlen(w->name, CACHE_NAME_MAX));
		XXH3_64bits_update(s, &w->layer, 4);
		XXH3_64bits_update(s, &w->elt, 4);
		XXH3_64bits_update(s, &w->ndim, 4);
		XXH3_64bits_update(s, &w->token_axis, 4);
		for (uint32_t d = 0; d < w->ndim; d++) {
			int64_t x = d == w->token_axis ? 0 : w->dims[d];
			XXH3_64bits_update(s, &x, 8);
		}
	}
	uint64_t h = XXH3_64bits_digest(s);
	XXH3_freeState(s);
	return h;
}

/* ---- the index of entries (the planner's offer) ---- */

typedef struct cache_spill_ent {
	char name[17];
	int32_t *ids; /* [valid] */
	uint64_t valid, taint, end_len;
	uint32_t n_anc;
	uint64_t anc[SPILL_ANCHORS];
	char owner[48]; /* the session key (cut), for the refusal's line */
} cache_spill_ent;

static void index_drop(cache *c, const char *name)
{
	for (uint32_t i = 0; i < c->spill.n_ent; i++)
		if (!strcmp(c->spill.ent[i].name, name)) {
			free(c->spill.ent[i].ids);
			c->spill.ent[i] = c->spill.ent[--c->spill.n_ent];
			return;
		}
}

static void index_clear(cache *c)
{
	for (uint32_t i = 0; i < c->spill.n_ent; i++)
		free(c->spill.ent[i].ids);
	free(c->spill.ent);
	c->spill.ent = NULL;
	c->spill.n_ent = 0;
}

/* ---- the directory ---- */

static double now_ms(void)
{
	return moor_now() * 1e3;
}

static void entry_name(const cache *c, const int32_t *ids, uint64_t n,
		       const char *session, char out[17])
{
	uint64_t h;
	if (!cache_session_none(session))
		h = XXH3_64bits_withSeed(session, strlen(session), 1);
	else
		h = XXH3_64bits_withSeed(
		    ids, cache_min64(n, c->lay->grid) * sizeof *ids, 2);
	snprintf(out, 17, "%016llx", (unsigned long long)h);
}

static int open_dir_at(int dfd, const char *name, int make)
{
	if (make && mkdirat(dfd, name, 0700) < 0 && errno != EEXIST)
		return -errno;
	int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

static int mkdir_p(const char *path)
{
	char b[512];
	if (snprintf(b, sizeof b, "%s", path) >= (int)sizeof b)
		return MOOR_ERANGE;
	for (char *p = b + 1; *p; p++)
		if (*p == '/') {
			*p = 0;
			if (mkdir(b, 0700) < 0 && errno != EEXIST)
				return -errno;
			*p = '/';
		}
	if (mkdir(b, 0700) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

typedef struct ent_info {
	char name[64];
	time_t mtime; /* the manifest's */
	uint64_t bytes;
} ent_info;

/* Every entry directory (with a manifest: mtime; without: mtime 0). */
static int list_entries(cache *c, ent_info **out)
{
	*out = NULL;
	int d2 = dup(c->spill.dfd);
	if (d2 < 0)
		return 0;
	DIR *d = fdopendir(d2);
	if (!d) {
		close(d2);
		return 0;
	}
	rewinddir(d);
	int n = 0, cap = 0;
	ent_info *v = NULL;
	struct dirent *e;
	while ((e = readdir(d))) {
		struct stat st;
		if (e->d_name[0] == '.' || strlen(e->d_name) >= 64 ||
		    fstatat(c->spill.dfd, e->d_name, &st, 0) < 0 ||
		    !S_ISDIR(st.st_mode))
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 16;
			ent_info *nv = realloc(v, (size_t)cap * sizeof *v);
			if (!nv)
				break;
			v = nv;
		}
		ent_info *x = &v[n++];
		snprintf(x->name, sizeof x->name, "%s", e->d_name);
		char mp[96];
		snprintf(mp, sizeof mp, "%s/manifest", e->d_name);
		x->mtime =
		    fstatat(c->spill.dfd, mp, &st, 0) == 0 ? st.st_mtime : 0;
		x->bytes = dfile_bytes(c->spill.dfd, e->d_name);
	}
	closedir(d);
	*out = v;
	return n;
}

static void entry_delete(cache *c, const char *name, const char *why)
{
	index_drop(c, name);
	if (dfile_rm_rf(c->spill.dfd, name) == 0)
		moor_info("[spill] entry %s deleted: %s", name, why);
	(void)dfile_sync_dir(c->spill.dfd, NULL);
}

/* Removes the .new files of entry directory fd (a save that did not reach
 * its commit); returns how many. */
static int sweep_new(int fd)
{
	int d2 = dup(fd), n = 0;
	DIR *d = d2 >= 0 ? fdopendir(d2) : NULL;
	if (!d) {
		if (d2 >= 0)
			close(d2);
		return 0;
	}
	rewinddir(d);
	struct dirent *e;
	while ((e = readdir(d))) {
		size_t l = strlen(e->d_name);
		if (l > 4 && !strcmp(e->d_name + l - 4, ".new") &&
		    unlinkat(fd, e->d_name, 0) == 0)
			n++;
	}
	closedir(d);
	return n;
}

int cache_spill_open(cache *c, char *err)
{
	c->spill.dfd = -1;
	if (!c->cfg.spill_dir[0])
		return 0;
	char p[300];
	snprintf(p, sizeof p, "%s/sessions", c->cfg.spill_dir);
	int rc = mkdir_p(p);
	if (!rc) {
		int fd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		rc = fd < 0 ? -errno : 0;
		c->spill.dfd = fd;
	}
	if (rc) {
		moor_errf(err, "spill: %s: %s", p, moor_strerror(rc));
		return rc;
	}
	c->spill.on = 1;
	/* the codec's threads, and the host's sums' (with the codec off
	 * too) */
	if (c->cfg.codec_threads > 1)
		c->spill.pool = moor_pool_new((int)c->cfg.codec_threads);
	int tmp = dfile_sweep_tmp(c->spill.dfd);
	ent_info *v;
	int n = list_entries(c, &v);
	time_t now = time(NULL);
	uint32_t kept = 0;
	uint64_t bytes = 0;
	for (int i = 0; i < n; i++) {
		int fd = open_dir_at(c->spill.dfd, v[i].name, 0);
		if (fd >= 0) {
			tmp += dfile_sweep_tmp(fd) + sweep_new(fd);
			close(fd);
		}
		if (!v[i].mtime) {
			entry_delete(c, v[i].name,
				     "no manifest (a write that did not "
				     "finish)");
			c->spill.k.swept++;
		} else if (c->cfg.spill_hours &&
			   now - v[i].mtime >
			       (time_t)c->cfg.spill_hours * 3600) {
			entry_delete(c, v[i].name, "unused for over the TTL");
			c->spill.k.expired++;
		} else {
			kept++;
			bytes += v[i].bytes;
		}
	}
	free(v);
	moor_info("[spill] %s: %u entries, %.1f MiB%s", p, kept,
		  (double)bytes / (1 << 20),
		  tmp ? " (removed unfinished .tmp and .new files)" : "");
	return 0;
}

void cache_spill_close(cache *c)
{
	if (c->spill.dfd >= 0)
		close(c->spill.dfd);
	c->spill.dfd = -1;
	c->spill.on = 0;
	moor_pool_free(c->spill.pool);
	c->spill.pool = NULL;
	codec_ws_fini(&c->spill.cws);
	index_clear(c);
}

/* ---- the manifest ---- */

/* A decoded manifest; pointers into buf. */
typedef struct man_view {
	void *buf;
	uint64_t len;
	spill_hdr *h;
	spill_man *m;
	const char *session;
	int32_t *ids;
	uint64_t *blk;	/* per block: rows, ids hash, 2 * n_views sums */
	uint64_t *anc;	/* per anchor: line, 2 * n_sections sums */
	uint64_t *end;	/* 2 * n_sections sums, or NULL */
	cache_mark *mk; /* n_mk marks */
} man_view;

static uint64_t pad8(uint64_t x)
{
	return (x + 7) & ~7ull;
}

static int man_parse(cache *c, void *buf, uint64_t len, man_view *mv, char *why)
{
	memset(mv, 0, sizeof *mv);
	mv->buf = buf;
	mv->len = len;
	uint32_t ns = c->lay->n_sections, nv = c->lay->n_views;
	if (len < sizeof(spill_hdr) + sizeof(spill_man) + 8) {
		snprintf(why, MOOR_ERRLEN, "manifest: %llu bytes, too short",
			 (unsigned long long)len);
		return MOOR_ETRUNC;
	}
	uint64_t sum;
	memcpy(&sum, (char *)buf + len - 8, 8);
	if (XXH3_64bits(buf, len - 8) != sum) {
		snprintf(why, MOOR_ERRLEN, "manifest: checksum mismatch");
		return MOOR_EFORMAT;
	}
	spill_hdr *h = buf;
	if (h->magic != SPILL_MAGIC || h->version != SPILL_VERSION ||
	    h->kind != SF_MANIFEST) {
		snprintf(why, MOOR_ERRLEN,
			 "manifest: magic/version/kind %llx "
			 "%u %u",
			 (unsigned long long)h->magic, h->version, h->kind);
		return MOOR_EVERSION;
	}
	if (!cache_ledger_fp_ok(c, h->fp) ||
	    h->digest != cache_tier_layout_digest(c->lay, SPILL_VERSION)) {
		snprintf(why, MOOR_ERRLEN, "written under another %s",
			 !cache_ledger_fp_ok(c, h->fp) ? "fingerprint"
						       : "state layout");
		return MOOR_EVERSION;
	}
	spill_man *m = (spill_man *)(h + 1);
	uint64_t o = sizeof *h + sizeof *m;
	if (m->valid == 0 || m->valid > c->lay->window ||
	    m->n_blk != (m->valid + SPILL_BLK - 1) / SPILL_BLK ||
	    m->n_anc > SPILL_ANCHORS || m->end_len > m->valid ||
	    m->session_len > 4096 || m->n_mk > m->valid) {
		snprintf(why, MOOR_ERRLEN,
			 "manifest: valid %llu (window %llu), %llu blocks, "
			 "%llu anchors, end %llu",
			 (unsigned long long)m->valid,
			 (unsigned long long)c->lay->window,
			 (unsigned long long)m->n_blk,
			 (unsigned long long)m->n_anc,
			 (unsigned long long)m->end_len);
		return MOOR_EFORMAT;
	}
	uint64_t need = o + pad8(m->session_len) + pad8(m->valid * 4) +
			m->n_blk * (2 + 2ull * nv) * 8 +
			m->n_anc * (1 + 2ull * ns) * 8 +
			(m->end_len ? 2ull * ns * 8 : 0) + m->n_mk * 24 + 8;
	if (need != len) {
		snprintf(why, MOOR_ERRLEN,
			 "manifest: %llu bytes where its counts say %llu",
			 (unsigned long long)len, (unsigned long long)need);
		return MOOR_EFORMAT;
	}
	mv->h = h;
	mv->m = m;
	mv->session = m->session_len ? (char *)buf + o : NULL;
	o += pad8(m->session_len);
	mv->ids = (int32_t *)((char *)buf + o);
	o += pad8(m->valid * 4);
	mv->blk = (uint64_t *)((char *)buf + o);
	o += m->n_blk * (2 + 2ull * nv) * 8;
	mv->anc = (uint64_t *)((char *)buf + o);
	o += m->n_anc * (1 + 2ull * ns) * 8;
	mv->end = m->end_len ? (uint64_t *)((char *)buf + o) : NULL;
	o += m->end_len ? 2ull * ns * 8 : 0;
	mv->mk = (cache_mark *)((char *)buf + o);
	for (uint64_t i = 0; i < m->n_mk; i++)
		if (mv->mk[i].start > m->valid ||
		    mv->mk[i].len > m->valid - mv->mk[i].start) {
			snprintf(why, MOOR_ERRLEN,
				 "manifest: a mark past the rows");
			return MOOR_EFORMAT;
		}
	if (mv->session && memchr(mv->session, 0, m->session_len) !=
			       mv->session + m->session_len - 1) {
		snprintf(why, MOOR_ERRLEN, "manifest: a bad session key");
		return MOOR_EFORMAT;
	}
	for (uint64_t i = 1; i < m->n_anc; i++)
		if (mv->anc[i * (1 + 2ull * ns)] <=
		    mv->anc[(i - 1) * (1 + 2ull * ns)]) {
			snprintf(why, MOOR_ERRLEN,
				 "manifest: anchors out of order");
			return MOOR_EFORMAT;
		}
	for (uint64_t i = 0; i < m->n_anc; i++) {
		uint64_t L = mv->anc[i * (1 + 2ull * ns)];
		if (!L || L > m->valid || L % c->lay->grid) {
			snprintf(why, MOOR_ERRLEN,
				 "manifest: an anchor at %llu",
				 (unsigned long long)L);
			return MOOR_EFORMAT;
		}
	}
	return 0;
}

static int man_load(cache *c, int efd, man_view *mv, char *why)
{
	void *b;
	uint64_t n;
	int rc = dfile_read(efd, "manifest", 1ull << 34, &b, &n, why);
	if (rc)
		return rc;
	rc = man_parse(c, b, n, mv, why);
	if (rc) {
		free(b);
		memset(mv, 0, sizeof *mv);
	}
	return rc;
}

static void index_put(cache *c, const char *name, const man_view *mv)
{
	index_drop(c, name);
	cache_spill_ent *v =
	    realloc(c->spill.ent, (c->spill.n_ent + 1) * sizeof *c->spill.ent);
	if (!v)
		return;
	c->spill.ent = v;
	cache_spill_ent *e = &v[c->spill.n_ent];
	memset(e, 0, sizeof *e);
	e->ids = malloc(mv->m->valid * 4);
	if (!e->ids)
		return;
	memcpy(e->ids, mv->ids, mv->m->valid * 4);
	snprintf(e->name, sizeof e->name, "%s", name);
	snprintf(e->owner, sizeof e->owner, "%s",
		 mv->session ? mv->session : "");
	e->valid = mv->m->valid;
	e->taint = mv->m->taint;
	e->end_len = mv->m->end_len;
	e->n_anc = (uint32_t)mv->m->n_anc;
	for (uint32_t i = 0; i < e->n_anc; i++)
		e->anc[i] = mv->anc[i * (1 + 2ull * c->lay->n_sections)];
	c->spill.n_ent++;
}

static void index_load(cache *c, const char *name)
{
	int efd = open_dir_at(c->spill.dfd, name, 0);
	if (efd < 0)
		return;
	char why[MOOR_ERRLEN];
	man_view mv = {0};
	if (man_load(c, efd, &mv, why) == 0) {
		index_put(c, name, &mv);
		free(mv.buf);
	}
	close(efd);
}

static void hdr_fill(cache *c, spill_hdr *h, uint32_t kind, uint64_t index,
		     uint64_t rows, uint64_t n_sums, uint64_t data)
{
	memset(h, 0, sizeof *h);
	h->magic = SPILL_MAGIC;
	h->version = SPILL_VERSION;
	h->kind = kind;
	h->index = index;
	h->rows = rows;
	h->digest = c->spill.digest;
	h->n_sums = n_sums;
	h->data = data;
	h->raw = data;
	memcpy(h->fp, c->lay->fingerprint, 32);
}

/* ---- host copies on the pool ----
 *
 * On a host-mapped device arena (the memcpy mover: the CPU backend) the
 * spill's copies between the live buffers and its staging buffer are
 * memcpy on the daemon's thread, and a read-back at an attach writes
 * pages nobody wrote yet: a page fault each (shared memory on this
 * 2-core VM: 1.2 to 1.4 GB/s on one thread, 2.6 on two; warm, 9.5). The
 * memcpy mover's copies are memcpy, which any thread may run (disk.c's
 * adopter does), so there the spill cuts them in pieces of HC_PIECE and
 * runs them on its pool: the same bytes to the same places as the
 * mover's calls would (cache_rows_out and _in: a copy2d a view, a run a
 * view's outer index; cache_secs_in: a copy a section;
 * cache_anchor_adopt: one copy of the sections into the anchor's block),
 * complete on return as the memcpy mover's are, in no order among them
 * (none overlaps another: the mover's batch has the same rule). Every
 * other mover (CUDA: DMA on its stream) and a spill without a pool get
 * the mover's own calls, as before. Copies between host buffers of the
 * spill's own (a raw data part into its slot, a raw file's data out of
 * its read buffer) run on the pool whatever the mover (host_memcpy).
 * MOOR_SPILL_POOLCOPY=0 (a measuring switch) keeps every copy on the
 * daemon's thread, the mover's calls and memcpy, as before. */

#define HC_PIECE (1ull << 20)

typedef struct hc_piece {
	char *dst;
	const char *src;
	uint64_t n;
} hc_piece;

typedef struct host_cp {
	cache *c;
	hc_piece *v; /* NULL: the mover's calls */
	uint32_t n, cap;
} host_cp;

static uint64_t hc_pieces(uint64_t n)
{
	return (n + HC_PIECE - 1) / HC_PIECE;
}

static int poolcopy_on(void)
{
	const char *e = getenv("MOOR_SPILL_POOLCOPY");
	return !(e && !strcmp(e, "0"));
}

typedef struct mc_job {
	char *dst;
	const char *src;
	uint64_t n;
	int tasks;
} mc_job;

static void mc_task(void *ctx, int t)
{
	const mc_job *j = ctx;
	uint64_t a = j->n * (uint64_t)t / (uint64_t)j->tasks,
		 b = j->n * (uint64_t)(t + 1) / (uint64_t)j->tasks;
	memcpy(j->dst + a, j->src + a, b - a);
}

/* memcpy of host memory (the staging buffer, a slot, a read buffer) on
 * the pool, in 4 ranges a thread; one thread under 4 MiB. */
static void host_memcpy(cache *c, void *dst, const void *src, uint64_t n)
{
	int th = moor_pool_threads(c->spill.pool);
	if (th < 2 || n < (4ull << 20) || !poolcopy_on()) {
		if (n)
			memcpy(dst, src, n);
		return;
	}
	mc_job j = {dst, src, n, 4 * th};
	moor_pool_run(c->spill.pool, j.tasks, mc_task, &j);
}

/* The pieces for a block's rows (up to SPILL_BLK of every view), or the
 * sections and a block of them (hc_end), whichever is more, made up
 * front. */
static void hc_init(host_cp *h, cache *c)
{
	memset(h, 0, sizeof *h);
	h->c = c;
	if (c->mv != &arena_mover_memcpy ||
	    moor_pool_threads(c->spill.pool) < 2 || !poolcopy_on())
		return;
	uint64_t rows = 0, secs = 0;
	for (uint32_t v = 0; v < c->lay->n_views; v++)
		rows += c->vg[v].outer * hc_pieces(SPILL_BLK * c->vg[v].inner);
	for (uint32_t i = 0; i < c->lay->n_sections; i++)
		secs += hc_pieces(c->lay->sec[i].bytes);
	uint64_t cap = cache_max64(rows, secs + hc_pieces(c->sec_bytes));
	if (cap > UINT32_MAX)
		return;
	h->v = malloc((cap ? cap : 1) * sizeof *h->v);
	h->cap = (uint32_t)cap;
}

static void hc_fini(host_cp *h)
{
	free(h->v);
	h->v = NULL;
}

static void hc_add(host_cp *h, void *dst, const void *src, uint64_t n)
{
	for (uint64_t o = 0; o < n; o += HC_PIECE) {
		MOOR_ASSERT(h->n < h->cap);
		h->v[h->n++] =
		    (hc_piece){(char *)dst + o, (const char *)src + o,
			       cache_min64(HC_PIECE, n - o)};
	}
}

typedef struct hc_job {
	const hc_piece *v;
	uint32_t n, tasks;
} hc_job;

static void hc_task(void *ctx, int t)
{
	const hc_job *j = ctx;
	uint64_t a = (uint64_t)j->n * (uint64_t)t / j->tasks,
		 b = (uint64_t)j->n * (uint64_t)(t + 1) / j->tasks;
	for (uint64_t i = a; i < b; i++)
		memcpy(j->v[i].dst, j->v[i].src, j->v[i].n);
}

static void hc_run(host_cp *h)
{
	uint32_t k = (uint32_t)moor_pool_threads(h->c->spill.pool) * 4;
	hc_job j = {h->v, h->n, h->n < k ? h->n : k};
	if (j.tasks)
		moor_pool_run(h->c->spill.pool, (int)j.tasks, hc_task, &j);
	h->n = 0;
}

/* cache_rows_out (out) or cache_rows_in of rows [live_row, live_row + n)
 * and a compact rows buffer of window bwin at its row brow. */
static int hc_rows(host_cp *h, int out, void *buf, uint64_t bwin, uint64_t brow,
		   uint64_t live_row, uint64_t n)
{
	cache *c = h->c;
	if (!h->v)
		return out ? cache_rows_out(c, buf, bwin, brow, live_row, n)
			   : cache_rows_in(c, buf, bwin, brow, live_row, n);
	uint64_t o = 0, W = c->lay->window;
	MOOR_ASSERT(live_row + n <= W && brow + n <= bwin && n <= SPILL_BLK);
	for (uint32_t i = 0; i < c->lay->n_views && n; i++) {
		const cache_vgeom *g = &c->vg[i];
		char *live = (char *)cache_dev_at(c, c->view_off[i]) +
			     live_row * g->inner;
		char *b = (char *)buf + o + brow * g->inner;
		for (uint64_t q = 0; q < g->outer; q++) {
			char *lq = live + q * W * g->inner,
			     *bq = b + q * bwin * g->inner;
			if (out)
				hc_add(h, bq, lq, n * g->inner);
			else
				hc_add(h, lq, bq, n * g->inner);
		}
		o += bwin * g->rowb;
	}
	hc_run(h);
	return 0;
}

/* The pieces of cache_secs_in's copies: the sections back to back at src
 * into the live ones. */
static void hc_secs_add(host_cp *h, const void *src)
{
	cache *c = h->c;
	uint64_t o = 0;
	for (uint32_t i = 0; i < c->lay->n_sections; i++) {
		hc_add(h, cache_dev_at(c, c->sec_off[i]), (const char *)src + o,
		       c->lay->sec[i].bytes);
		o += c->lay->sec[i].bytes;
	}
}

/* cache_secs_in: the sections back to back at src into the live ones. */
static int hc_secs_in(host_cp *h, const void *src)
{
	if (!h->v)
		return cache_secs_in(h->c, src);
	hc_secs_add(h, src);
	hc_run(h);
	return 0;
}

/* cache_anchor_adopt of the sections at src as the anchor at line: its
 * two halves (reserve, place) around the copy. */
static int hc_adopt(host_cp *h, uint64_t line, const void *src, uint64_t limit)
{
	cache *c = h->c;
	if (!h->v)
		return cache_anchor_adopt(c, line, src, limit);
	uint64_t off;
	int rc = cache_anchor_reserve(c, line, limit, &off);
	if (rc)
		return rc > 0 ? 0 : rc;
	hc_add(h, cache_dev_at(c, off), src, c->sec_bytes);
	hc_run(h);
	return cache_anchor_place(c, line, off);
}

/* hc_secs_in of the sections at src, and cache_end_keep of them as the end
 * anchor of len tokens: on the pool both copies read src (the file's
 * bytes) at once, where cache_end_keep copies the live sections after
 * them. */
static int hc_end(host_cp *h, const void *src, uint64_t len, uint64_t taint)
{
	cache *c = h->c;
	if (!h->v) {
		int rc = cache_secs_in(c, src);
		return rc ? rc : cache_end_keep(c, len, taint);
	}
	uint64_t off;
	int rc = cache_end_reserve(c, &off);
	if (rc)
		return rc;
	hc_secs_add(h, src);
	hc_add(h, cache_dev_at(c, off), src, c->sec_bytes);
	hc_run(h);
	cache_end_mark(c, len, taint);
	return 0;
}

/* The data part of a file into out (codec_bound(n) bytes, the save's slot
 * buffer): encoded when the codec is on and it shrinks, else the raw bytes
 * copied, so that the writer reads nothing but its slot (the pipeline
 * below). */
static int data_part(cache *c, spill_hdr *h, const void *src, uint64_t n,
		     void *out, dfile_part *p)
{
	p->p = out;
	p->n = n;
	if (c->cfg.spill_codec && n) {
		uint64_t en;
		int rc = codec_encode(src, n, out, &en, c->spill.pool,
				      &c->spill.cws);
		if (rc)
			return rc;
		if (en < n) {
			p->n = en;
			h->codec = 1;
			h->data = en;
			c->spill.k.codec_raw += n;
			c->spill.k.codec_out += en;
			return 0;
		}
	}
	host_memcpy(c, out, src, n);
	return 0;
}

/* ---- save ---- */

/* The sums of bytes on the host (a staged block, an anchor's sections,
 * a file read back) are dfile_sum2's, taken on the spill's pool in parts
 * (dfile_sum2_pieces: bit for bit the same). Device memory keeps the
 * mover's sum2. */

/* The two sums of each section of an anchor's sections back to back. */
static void secs_sums(cache *c, const void *secs, uint64_t *s)
{
	uint64_t len[CACHE_MAX_SECTIONS];
	for (uint32_t i = 0; i < c->lay->n_sections; i++)
		len[i] = c->lay->sec[i].bytes;
	dfile_sum2_pieces(secs, len, c->lay->n_sections, s, 0, c->spill.pool);
}

/* The two sums of each view's rows in a block staged view by view. */
static void blk_sums(cache *c, const void *stage, uint64_t rows, uint64_t *s)
{
	uint64_t len[CACHE_MAX_VIEWS];
	for (uint32_t v = 0; v < c->lay->n_views; v++)
		len[v] = rows * c->vg[v].rowb;
	dfile_sum2_pieces(stage, len, c->lay->n_views, s, 0, c->spill.pool);
}

static int file_exists(int fd, const char *name)
{
	struct stat st;
	return fstatat(fd, name, &st, 0) == 0;
}

/* The staging buffer of the spill's copies, bytes long: on a CUDA device
 * arena a block of the host arena, which the mover registered, so its
 * copies to and from the device are DMA; else (or when the host arena has
 * no room) malloc'd. *off: the block's offset, UINT64_MAX when malloc'd.
 * Freed by stage_free after the mover's last copy of it is synced. */
static void *stage_new(cache *c, uint64_t bytes, uint64_t *off)
{
	*off = UINT64_MAX;
	if (c->cfg.dev_cuda >= 0 &&
	    arena_alloc(c->host, bytes ? bytes : 1, off) == 0)
		return cache_host_at(c, *off);
	*off = UINT64_MAX;
	return malloc(bytes ? bytes : 1);
}

static void stage_free(cache *c, void *p, uint64_t off)
{
	if (off != UINT64_MAX)
		arena_release(c->host, off);
	else
		free(p);
}

/* The sec_bytes of sections at device offset off where the host can read
 * them: in place when the device arena is host memory (the CPU backend),
 * else copied by the mover into stage (sec_bytes or more) and waited
 * for. */
static int secs_host(cache *c, uint64_t off, void *stage, const void **out)
{
	*out = NULL;
	if (c->cfg.dev_cuda < 0) {
		*out = cache_dev_at(c, off);
		return 0;
	}
	int rc =
	    c->mv->copy(c->mv->ctx, stage, cache_dev_at(c, off), c->sec_bytes);
	if (!rc)
		rc = cache_sync(c);
	if (!rc)
		*out = stage;
	return rc;
}

/* ---- the sums where the bytes are ----
 *
 * The incremental rule needs a block's sums (and an anchor's) before it
 * knows whether the block is written. Summed on the host, every block of
 * the conversation is copied off the device to learn that most of them
 * need no write. The mover's sum2 (arena.h) sums bytes where they are (on
 * CUDA a kernel over device memory; the memcpy mover's is dfile_sum2), so
 * a block or anchor that the old manifest holds is checked in place and
 * copied off the device only when it changed.
 *
 * Why the sums are the same: blk_sums sums each view's part of the staged
 * block, cache_rows_out's compact buffer of window `rows`: `outer` runs of
 * rows * inner bytes, back to back. A view of outer 1 (qwen35's K and V:
 * the token axis first) has its block as one run of rows * inner bytes in
 * the live buffers too, at view_off + a * inner, the same bytes in the
 * same order: sum2 over that run is dfile_sum2 over its staged copy, bit
 * for bit (sum2's contract). A view of outer > 1 is staged as before (that
 * view alone, into its place in the stage) and summed on the host. An
 * anchor's sections lie back to back at its offset, as secs_sums reads
 * them from the stage.
 *
 * When: a block whose rows and ids the old manifest holds and whose file
 * is there (else it is written whatever its sums: staged and summed as
 * before), an anchor whose line the old manifest holds with its file.
 * A block found changed then stages the views still missing and is
 * encoded from the stage as before; its sums are the ones just taken.
 * blocks_unread and anchors_unread count those kept with not a byte
 * copied off the device. MOOR_SPILL_DEVSUMS=0 (a measuring switch) takes
 * the staged path always, as does a mover without sum2. */

static int devsums_on(const cache *c)
{
	const char *e = getenv("MOOR_SPILL_DEVSUMS");
	return c->mv->sum2 && !(e && !strcmp(e, "0"));
}

/* The views picked (pick[v], [n_views]) of block rows [a, a + rows) into
 * their places in stage (cache_rows_out's compact buffer of window rows),
 * waited for. */
static int stage_views(cache *c, void *stage, uint64_t a, uint64_t rows,
		       const uint8_t *pick)
{
	MOOR_ASSERT(c->n_xq == 0);
	int rc = cache_rows_add_some(c, 1, stage, rows, 0, a, rows, pick);
	int fr = cache_xq_flush(c);
	if (!rc)
		rc = fr;
	return rc ? rc : cache_sync(c);
}

/* The sums of block rows [a, a + rows) as blk_sums gives them, into s:
 * the views with run[v] (outer 1) by the mover where they are, the others
 * staged (stage_views of !run) and summed here; n_run of them are runs. */
static int blk_sums_dev(cache *c, void *stage, const uint8_t *run,
			const uint8_t *norun, uint32_t n_run, uint64_t a,
			uint64_t rows, uint64_t *s)
{
	int rc = 0;
	if (n_run < c->lay->n_views)
		rc = stage_views(c, stage, a, rows, norun);
	uint64_t o = 0;
	for (uint32_t v = 0; v < c->lay->n_views && !rc; v++) {
		const cache_vgeom *g = &c->vg[v];
		uint64_t n = rows * g->rowb;
		if (run[v])
			rc = c->mv->sum2(
			    c->mv->ctx,
			    (const char *)cache_dev_at(c, c->view_off[v]) +
				a * g->inner,
			    n, s + 2 * v);
		else
			dfile_sum2_pieces((const char *)stage + o, &n, 1,
					  s + 2 * v, 0, c->spill.pool);
		o += n;
	}
	return rc;
}

/* The sums of an anchor's sections at device offset off, as secs_sums
 * gives them, by the mover where they are. */
static int secs_sums_dev(cache *c, uint64_t off, uint64_t *s)
{
	const char *p = cache_dev_at(c, off);
	int rc = 0;
	for (uint32_t i = 0; i < c->lay->n_sections && !rc; i++) {
		rc =
		    c->mv->sum2(c->mv->ctx, p, c->lay->sec[i].bytes, s + 2 * i);
		p += c->lay->sec[i].bytes;
	}
	return rc;
}

/* ---- the free-space floor ---- */

/* The tier's floor (cfg.disk_min_free, --disk-cache-min-free-gb 50) holds
 * for the spill too: no write of it takes the file system's free space
 * under the floor. A save that would first removes the least recently
 * used entries (not its own) when that makes the room, else it is not
 * made; either way one line with the numbers, and floor_binds counts the
 * saves not made. A floor of 0 leaves the file system's room to the
 * writes (a failed write costs the entry, as before). */

static uint64_t spill_free(cache *c)
{
	struct statvfs sv;
	return fstatvfs(c->spill.dfd, &sv) == 0
		   ? (uint64_t)sv.f_bavail * sv.f_frsize
		   : UINT64_MAX;
}

/* A file of n bytes as the file system counts it (4 KiB blocks). */
static uint64_t fs_bytes(uint64_t n)
{
	return (n + 4095) & ~4095ull;
}

/* What a save of the resident conversation may write: the blocks and
 * anchors it cannot keep at their raw size (the codec writes a block
 * only when it shrinks), the manifest (mlen) and the drain's resident
 * name. A block is counted kept when the old manifest has its rows and
 * ids and its file is there, an anchor when the old manifest has its
 * line: a guess, which the file-by-file check (floor_file) backs. */
static uint64_t save_need(cache *c, int efd, const man_view *old,
			  uint64_t valid, const uint64_t *lines, uint32_t n_anc,
			  int end, uint64_t mlen)
{
	uint32_t ns = c->lay->n_sections, nv = c->lay->n_views;
	uint64_t n_blk = (valid + SPILL_BLK - 1) / SPILL_BLK, need = 0;
	for (uint64_t j = 0; j < n_blk; j++) {
		uint64_t a = j * SPILL_BLK,
			 rows = cache_min64(SPILL_BLK, valid - a);
		char bn[32];
		snprintf(bn, sizeof bn, "r%llu", (unsigned long long)j);
		const uint64_t *e = old && j < old->m->n_blk
					? old->blk + j * (2 + 2ull * nv)
					: NULL;
		if (e && e[0] == rows &&
		    e[1] == XXH3_64bits(c->res_ids + a, rows * 4) &&
		    file_exists(efd, bn))
			continue;
		need += fs_bytes(sizeof(spill_hdr) + 2ull * nv * 8 +
				 rows * c->row_bytes);
	}
	uint64_t anc_b =
	    fs_bytes(sizeof(spill_hdr) + 2ull * ns * 8 + c->sec_bytes);
	for (uint32_t i = 0; i < n_anc; i++) {
		int kept = 0;
		for (uint64_t k = 0; old && k < old->m->n_anc; k++)
			kept |= old->anc[k * (1 + 2ull * ns)] == lines[i];
		need += kept ? 0 : anc_b;
	}
	if (end && !(old && old->end && old->m->end_len == c->end.len))
		need += anc_b;
	return need + fs_bytes(mlen) + fs_bytes(16);
}

/* Counts a save the floor stopped and says it in err, the line its
 * caller logs (the drain's, the eviction's). */
static void floor_said(cache *c, char *err, uint64_t fr, uint64_t need,
		       const char *name, uint64_t valid, const char *what)
{
	c->spill.k.floor_binds++;
	moor_errf(err,
		  "spill: the free-space floor binds: %.3f GB free, floor "
		  "%.3f GB, the save of %s (%llu tokens) may write %.1f MB: "
		  "%s",
		  (double)fr / 1e9, (double)c->cfg.disk_min_free / 1e9, name,
		  (unsigned long long)valid, (double)need / 1e6, what);
}

/* Makes room for a save of `need` bytes under the floor, removing the
 * least recently used entries other than `keep` when together they give
 * it (one line says how many). 0, or MOOR_ENOSPACE (nothing removed)
 * with *fr the free bytes. */
static int floor_room(cache *c, const char *keep, uint64_t need, uint64_t *fr)
{
	uint64_t floor = c->cfg.disk_min_free;
	*fr = spill_free(c);
	if (!floor || *fr >= floor + need)
		return 0;
	ent_info *v;
	int n = list_entries(c, &v);
	uint64_t give = 0;
	for (int i = 0; i < n; i++)
		if (strcmp(v[i].name, keep))
			give += fs_bytes(v[i].bytes);
	int rc = *fr + give >= floor + need ? 0 : MOOR_ENOSPACE;
	uint64_t fr0 = *fr, gone = 0, gone_b = 0;
	while (!rc && *fr < floor + need) {
		int lru = -1;
		for (int i = 0; i < n; i++)
			if (v[i].bytes && strcmp(v[i].name, keep) &&
			    (lru < 0 || v[i].mtime < v[lru].mtime))
				lru = i;
		if (lru < 0) {
			rc = MOOR_ENOSPACE;
			break;
		}
		entry_delete(c, v[lru].name,
			     "under the free-space floor (LRU)");
		c->spill.k.floor_evicted++;
		gone++;
		gone_b += v[lru].bytes;
		v[lru].bytes = 0;
		*fr = spill_free(c);
	}
	free(v);
	if (gone)
		moor_warn("[spill] the free-space floor: %.3f GB free, floor "
			  "%.3f GB, the save of %s may write %.1f MB: %llu "
			  "older entries (%.1f MB, least recently used first) "
			  "removed, %.3f GB free",
			  (double)fr0 / 1e9, (double)floor / 1e9, keep,
			  (double)need / 1e6, (unsigned long long)gone,
			  (double)gone_b / 1e6, (double)*fr / 1e9);
	return rc;
}

/* Before one file of n bytes: 0, or MOOR_ENOSPACE (said, counted) when it
 * would take the free space under the floor. */
static int floor_file(cache *c, const char *name, uint64_t valid, uint64_t n,
		      char *err)
{
	uint64_t floor = c->cfg.disk_min_free, fr;
	if (!floor || (fr = spill_free(c)) >= floor + fs_bytes(n))
		return 0;
	floor_said(c, err, fr, fs_bytes(n), name, valid,
		   "a file of it not written (the entry goes)");
	return MOOR_ENOSPACE;
}

/* ---- the save's two stages: an encoder and a writer ----
 *
 * A save's files are made in two stages that overlap: the encoder (the
 * save's own thread, cached's daemon thread) sums block k + 1 (where it
 * is, or copied out of the live buffers), decides whether it is kept,
 * copies it out if it is not and encodes it on the codec's pool, while
 * the writer (a thread of the save's own, started before its first file
 * and joined before its commit) writes block k as NAME.new (.tmp,
 * fdatasync, rename: dfile_write_direct, after the free-space floor's
 * check; save_commit renames it into place once every file has landed). The
 * anchors and the end follow the blocks through the same two stages. Two
 * slots go round between them, each with its out buffer (the encoded
 * file's data, or its raw bytes copied: c->spill.cws's buffers 0
 * and 1, kept between saves); the staging buffer of the copies is the
 * encoder's alone, as before. What lands on the disk, and in which order,
 * is what the serial save wrote: the same files, one after the other.
 *
 * Threads and ownership:
 *   - a slot is the writer's while QUEUED and the encoder's otherwise;
 *     its state is read and written only under pipe.mu (QUEUED by the
 *     encoder, IDLE again by the writer), so everything the encoder wrote
 *     into it happens before the writer reads it, and the writer's answer
 *     (rc, err, the floor's numbers) before the encoder reads that: no
 *     atomics, no other lock. Whether a slot's answer is still to be
 *     collected (held) is the encoder's own field;
 *   - a QUEUED job's bytes are its slot's header and out buffer and the
 *     block's sums in the manifest buffer (mb), which its parts point at;
 *     the encoder writes none of them meanwhile: it fills FREE slots only,
 *     and of mb the entries of later files;
 *   - the writer touches of the cache only cfg.disk_min_free and the free
 *     space of spill.dfd (fstatvfs), both read; the counters
 *     (c->spill.k), the caller's err, the pool, c->spill.cws's planes, the
 *     mover (its copies and its sum2) and the staging buffer are the
 *     encoder's alone. A job's outcome waits in its slot until the
 *     encoder collects it, in the order the jobs were queued, so the
 *     error reported is the first that happened;
 *   - the writer takes the jobs in the order they were queued (slot 0, 1,
 *     0, ...); after a job that failed it writes nothing more (the jobs
 *     still queued come back not written), the encoder queues nothing more
 *     once it has collected a failure, and an encoder that fails on its
 *     own (the mover, memory) cancels what is queued the same way;
 *   - dfile's fault seam (the sweeps' hook) is called by one thread at a
 *     time: by the writer while the stages run, by the encoder before the
 *     writer is started and after it is joined (pthread_create and
 *     pthread_join order them).
 * MOOR_SPILL_WRITER=0 (a measuring switch, as MOOR_MOVER_LANES is) runs
 * each job on the encoder as it is queued: the serial save of before, for
 * bench_spill's rows and the tests that compare the two. */

enum { SW_IDLE = 0, SW_QUEUED };

typedef struct sw_slot {
	int state;     /* SW_*, under pipe.mu */
	int held;      /* the encoder's: queued, its answer not collected */
	uint32_t kind; /* SF_BLOCK, SF_ANCHOR, SF_END: which counter */
	char name[32]; /* the file: r<j>, a<line>, end */
	spill_hdr h;
	dfile_part p[3]; /* the header, the sums (in mb), the data (at
			  * slot_out: base after the header and sums) */
	uint64_t bytes;	 /* the file's */
	/* the file as one DFILE_ALIGN-aligned buffer (O_DIRECT): the header
	 * and sums copied in by the writer, then the data part the encoder
	 * put at slot_out; SLOT_PRE + codec_bound(the largest data part),
	 * padded to DFILE_ALIGN (c->spill.cws's buffer, aligned in it) */
	char *base;
	/* the writer's answer */
	int rc, skipped, floor; /* floor: rc is the free-space floor's */
	int direct;		/* written with O_DIRECT */
	uint64_t fr;		/* then: the free bytes it saw */
	double ms;		/* its write */
	char err[MOOR_ERRLEN];
} sw_slot;

typedef struct spill_pipe {
	cache *c;
	int efd;
	const char *ename; /* the entry, for the floor's line */
	uint64_t valid;
	int threaded; /* a writer thread runs (else jobs run as queued) */
	int serial;   /* no writer thread was started (said in the log) */
	int direct;   /* O_DIRECT where taken (MOOR_SPILL_DIRECT=0: not) */
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	sw_slot s[2];
	uint64_t put;		  /* jobs queued (the encoder's) */
	uint64_t take;		  /* jobs the writer took (the writer's) */
	int stop, cancel, failed; /* under mu */
	/* the encoder's */
	char (*landed)[32]; /* the files written (as NAME.new), in order */
	uint32_t n_landed, cap_landed;
	uint32_t n_direct; /* of them written with O_DIRECT */
	int rc;
	char *err;
	double t0, wait_ms, wr_ms;
} spill_pipe;

/* The most a file's header and sums take before its data. */
#define SLOT_PRE                                                               \
	(sizeof(spill_hdr) + 8ull * (CACHE_MAX_SECTIONS > CACHE_MAX_VIEWS      \
					 ? 2 * CACHE_MAX_SECTIONS              \
					 : 2 * CACHE_MAX_VIEWS))

/* Where a job's data part goes in its slot: after its header and n_sums
 * sums, so that the file is one buffer. */
static void *slot_out(sw_slot *s, uint64_t n_sums)
{
	MOOR_ASSERT(n_sums * 8 + sizeof(spill_hdr) <= SLOT_PRE);
	return s->base + sizeof(spill_hdr) + n_sums * 8;
}

/* One job on the writer (or, serial, the encoder): the floor's check and
 * the file; nothing after a failure or a cancel. */
static void sw_write(spill_pipe *p, sw_slot *s, int skip)
{
	s->rc = s->floor = 0;
	s->skipped = skip;
	s->err[0] = 0;
	s->ms = 0;
	if (skip)
		return;
	uint64_t floor = p->c->cfg.disk_min_free, fr;
	if (floor && (fr = spill_free(p->c)) < floor + fs_bytes(s->bytes)) {
		s->rc = MOOR_ENOSPACE;
		s->floor = 1;
		s->fr = fr;
		return;
	}
	char pend[40];
	snprintf(pend, sizeof pend, "%s.new", s->name);
	double t0 = now_ms();
	s->direct = 0;
	if (p->direct) {
		/* one aligned buffer: the header and sums before the data */
		MOOR_ASSERT(s->p[2].p == s->base + s->p[0].n + s->p[1].n);
		memcpy(s->base, s->p[0].p, s->p[0].n);
		memcpy(s->base + s->p[0].n, s->p[1].p, s->p[1].n);
		s->rc = dfile_write_direct(p->efd, pend, s->base, s->bytes, 1,
					   &s->direct, s->err);
	} else {
		s->rc = dfile_write(p->efd, pend, s->p, 3, 1, s->err);
	}
	s->ms = now_ms() - t0;
}

static void *sw_main(void *arg)
{
	spill_pipe *p = arg;
	pthread_mutex_lock(&p->mu);
	for (;;) {
		sw_slot *s = &p->s[p->take & 1];
		while (s->state != SW_QUEUED && !p->stop)
			pthread_cond_wait(&p->cv, &p->mu);
		if (s->state != SW_QUEUED)
			break; /* stopped, nothing queued */
		int skip = p->failed || p->cancel;
		pthread_mutex_unlock(&p->mu);
		sw_write(p, s, skip);
		pthread_mutex_lock(&p->mu);
		if (s->rc)
			p->failed = 1;
		s->state = SW_IDLE;
		p->take++;
		pthread_cond_broadcast(&p->cv);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

/* A written job's outcome into the counters or the save's error (the
 * encoder, once the writer is done with it). */
static void sw_collect(spill_pipe *p, sw_slot *s)
{
	cache *c = p->c;
	p->wr_ms += s->ms;
	s->held = 0;
	if (s->skipped)
		return;
	if (!s->rc) {
		if (s->kind == SF_BLOCK)
			c->spill.k.blocks_written++;
		else
			c->spill.k.anchors_written++;
		c->spill.k.bytes_written += s->bytes;
		p->n_direct += s->direct != 0;
		MOOR_ASSERT(p->n_landed < p->cap_landed);
		memcpy(p->landed[p->n_landed++], s->name, 32);
		return;
	}
	if (p->rc)
		return;
	p->rc = s->rc;
	if (s->floor)
		floor_said(c, p->err, s->fr, fs_bytes(s->bytes), p->ename,
			   p->valid,
			   "a file of it not written (the entry goes)");
	else
		snprintf(p->err, MOOR_ERRLEN, "%s", s->err);
}

/* The stages of a save of entry ename (valid tokens) into efd, of at most
 * files files; out: the largest data part's bytes. err: the save's (the
 * encoder's). pipe_close, then pipe_free, also after a failure. */
/* A worker thread of the spill's (the save's writer, the read-back's
 * reader) with its lock and condition: 1, or 0 where one could not be
 * made (nothing left made; the caller then works serially, slower and as
 * sound). worker_join joins it once told to stop, and frees the two. */
static int worker_start(pthread_mutex_t *mu, pthread_cond_t *cv, pthread_t *th,
			void *(*fn)(void *), void *arg)
{
	if (pthread_mutex_init(mu, NULL))
		return 0;
	if (pthread_cond_init(cv, NULL)) {
		pthread_mutex_destroy(mu);
		return 0;
	}
	if (pthread_create(th, NULL, fn, arg) == 0)
		return 1;
	pthread_cond_destroy(cv);
	pthread_mutex_destroy(mu);
	return 0;
}

static void worker_join(pthread_mutex_t *mu, pthread_cond_t *cv, pthread_t th)
{
	pthread_join(th, NULL);
	pthread_cond_destroy(cv);
	pthread_mutex_destroy(mu);
}

static int pipe_open(spill_pipe *p, cache *c, int efd, const char *ename,
		     uint64_t valid, uint64_t files, uint64_t out, char *err)
{
	memset(p, 0, sizeof *p);
	p->c = c;
	p->efd = efd;
	p->ename = ename;
	p->valid = valid;
	p->err = err;
	p->t0 = now_ms();
	p->landed = calloc(files ? files : 1, sizeof *p->landed);
	p->cap_landed = (uint32_t)files;
	if (!p->landed)
		return -ENOMEM;
	for (int i = 0; i < 2; i++) {
		uint64_t n = dfile_up4k(SLOT_PRE + codec_bound(out));
		char *b = codec_ws_buf(&c->spill.cws, i, n + DFILE_ALIGN);
		if (!b)
			return -ENOMEM;
		p->s[i].base = b + (-(uintptr_t)b & (DFILE_ALIGN - 1));
	}
	const char *d = getenv("MOOR_SPILL_DIRECT");
	p->direct = !(d && !strcmp(d, "0"));
	const char *w = getenv("MOOR_SPILL_WRITER");
	p->threaded = !(w && !strcmp(w, "0")) &&
		      worker_start(&p->mu, &p->cv, &p->th, sw_main, p);
	p->serial = !p->threaded;
	return 0;
}

/* The next slot to fill, once the writer is done with it (its outcome
 * collected): 0, or the save's first error (nothing more is queued). */
static int pipe_slot(spill_pipe *p, sw_slot **out)
{
	sw_slot *s = &p->s[p->put & 1];
	if (p->threaded) {
		double t0 = now_ms();
		pthread_mutex_lock(&p->mu);
		while (s->state == SW_QUEUED)
			pthread_cond_wait(&p->cv, &p->mu);
		pthread_mutex_unlock(&p->mu);
		p->wait_ms += now_ms() - t0;
	}
	if (s->held)
		sw_collect(p, s);
	*out = s;
	return p->rc;
}

/* Queues the filled slot s (name, kind, h, p, bytes) for the writer. */
static void pipe_put(spill_pipe *p, sw_slot *s)
{
	s->held = 1;
	if (!p->threaded) {
		sw_write(p, s, 0);
		p->put++;
		sw_collect(p, s);
		return;
	}
	pthread_mutex_lock(&p->mu);
	s->state = SW_QUEUED;
	p->put++;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
}

/* Waits for the jobs queued (cancel: they are not written), stops the
 * writer and collects their outcomes in their order: 0, or the first
 * error. */
static int pipe_close(spill_pipe *p, int cancel)
{
	if (p->threaded) {
		pthread_mutex_lock(&p->mu);
		p->stop = 1;
		p->cancel |= cancel;
		pthread_cond_broadcast(&p->cv);
		pthread_mutex_unlock(&p->mu);
		worker_join(&p->mu, &p->cv, p->th);
		p->threaded = 0;
	}
	/* the older job first: slot put & 1 was queued before the other */
	for (uint64_t i = 0; i < 2; i++) {
		sw_slot *s = &p->s[(p->put + i) & 1];
		if (s->held)
			sw_collect(p, s);
	}
	return p->rc;
}

/* The files the save wrote, removed (a save that failed before its
 * commit: the entry keeps its own). */
static void pipe_unland(spill_pipe *p)
{
	for (uint32_t i = 0; i < p->n_landed; i++) {
		char pend[40];
		snprintf(pend, sizeof pend, "%s.new", p->landed[i]);
		unlinkat(p->efd, pend, 0);
	}
	p->n_landed = 0;
}

static void pipe_free(spill_pipe *p)
{
	free(p->landed);
	p->landed = NULL;
}

/* Every file of the save has landed (as NAME.new): the manifest goes,
 * then each file takes its name's place (a rename, through dfile's fault
 * seam). From here a failure costs the entry: it has no manifest. The
 * caller then prunes, fsyncs the directory and writes the manifest. */
static int save_commit(spill_pipe *p, char *err)
{
	if (file_exists(p->efd, "manifest")) {
		unlinkat(p->efd, "manifest", 0);
		(void)dfile_sync_dir(p->efd, NULL);
	}
	for (uint32_t i = 0; i < p->n_landed; i++) {
		const char *nm = p->landed[i];
		char pend[40];
		snprintf(pend, sizeof pend, "%s.new", nm);
		int rc = dfile_fault ? dfile_fault(DFILE_OP_RENAME, nm) : 0;
		if (rc > 0)
			rc = 0;
		if (!rc && renameat(p->efd, pend, p->efd, nm) < 0)
			rc = -errno;
		if (rc) {
			moor_errf(err, "spill: entry %s: rename %s: %s",
				  p->ename, pend, moor_strerror(rc));
			return rc;
		}
	}
	return 0;
}

/* An anchor's sections (at device offset off; on a CUDA arena copied into
 * stage first) as a file of the entry, queued for the writer, unless the
 * old manifest holds the same sums and the file is there. sums: its place
 * in the manifest. devsums: the check by the mover's sum2 where the
 * sections are, before any copy (the section "the sums where the bytes
 * are"). */
static int save_secs(cache *c, spill_pipe *pp, void *stage, int devsums,
		     uint32_t kind, uint64_t line, uint64_t off, uint64_t *sums,
		     const uint64_t *old)
{
	uint32_t ns = c->lay->n_sections;
	sw_slot *s;
	int rc = pipe_slot(pp, &s);
	if (rc)
		return rc;
	if (kind == SF_END)
		snprintf(s->name, sizeof s->name, "end");
	else
		snprintf(s->name, sizeof s->name, "a%llu",
			 (unsigned long long)line);
	int maybe = old && file_exists(pp->efd, s->name), summed = 0;
	if (maybe && devsums) { /* the sums where the sections are */
		rc = secs_sums_dev(c, off, sums);
		if (rc)
			return rc;
		if (!memcmp(old, sums, 2ull * ns * 8)) {
			c->spill.k.anchors_kept++;
			c->spill.k.anchors_unread++;
			return 0;
		}
		summed = 1;
	}
	const void *src;
	rc = secs_host(c, off, stage, &src);
	if (rc)
		return rc;
	if (!summed)
		secs_sums(c, src, sums);
	if (maybe && !summed && !memcmp(old, sums, 2ull * ns * 8)) {
		c->spill.k.anchors_kept++;
		return 0;
	}
	hdr_fill(c, &s->h, kind, line, 0, 2ull * ns, c->sec_bytes);
	s->p[0] = (dfile_part){&s->h, sizeof s->h};
	s->p[1] = (dfile_part){sums, 2ull * ns * 8};
	rc = data_part(c, &s->h, src, c->sec_bytes, slot_out(s, 2ull * ns),
		       &s->p[2]);
	if (rc)
		return rc;
	s->kind = kind;
	s->bytes = sizeof s->h + 2ull * ns * 8 + s->p[2].n;
	pipe_put(pp, s);
	return 0;
}

/* Removes the files of the entry the new manifest does not name. */
static void save_prune(int efd, uint64_t n_blk, const uint64_t *lines,
		       uint32_t n_anc, int end)
{
	int d2 = dup(efd);
	DIR *d = d2 >= 0 ? fdopendir(d2) : NULL;
	if (!d) {
		if (d2 >= 0)
			close(d2);
		return;
	}
	rewinddir(d);
	struct dirent *e;
	while ((e = readdir(d))) {
		const char *s = e->d_name;
		if (s[0] == '.')
			continue;
		int keep = 0;
		char *endp;
		if (!strcmp(s, "manifest") || (end && !strcmp(s, "end")))
			keep = 1;
		else if (s[0] == 'r') {
			unsigned long long j = strtoull(s + 1, &endp, 10);
			keep = !*endp && s[1] && j < n_blk;
		} else if (s[0] == 'a') {
			unsigned long long L = strtoull(s + 1, &endp, 10);
			for (uint32_t i = 0; !*endp && s[1] && i < n_anc; i++)
				keep |= lines[i] == L;
		}
		if (!keep)
			unlinkat(efd, s, 0);
	}
	closedir(d);
}

/* After a save (keep: its entry): the entries unused for spill_hours go,
 * as at the open (a cached that runs for days keeps no older one), then
 * the least recently used until the rest fit spill_bytes. */
static void spill_budget(cache *c, const char *keep)
{
	ent_info *v;
	int n = list_entries(c, &v);
	uint64_t total = 0;
	time_t now = time(NULL);
	for (int i = 0; i < n; i++) {
		if (c->cfg.spill_hours && v[i].mtime &&
		    strcmp(v[i].name, keep) &&
		    now - v[i].mtime > (time_t)c->cfg.spill_hours * 3600) {
			entry_delete(c, v[i].name, "unused for over the TTL");
			c->spill.k.expired++;
			v[i].bytes = 0;
		}
		total += v[i].bytes;
	}
	while (c->cfg.spill_bytes && total > c->cfg.spill_bytes) {
		int lru = -1;
		for (int i = 0; i < n; i++)
			if (v[i].bytes && strcmp(v[i].name, keep) &&
			    (lru < 0 || v[i].mtime < v[lru].mtime))
				lru = i;
		if (lru < 0)
			break;
		entry_delete(c, v[lru].name, "over the spill budget (LRU)");
		c->spill.k.evicted++;
		total -= v[lru].bytes;
		v[lru].bytes = 0;
	}
	free(v);
}

/* Writes the resident conversation as an entry; *name gets its id. */
static int save_conv(cache *c, char name[17], char *err)
{
	uint32_t ns = c->lay->n_sections, nv = c->lay->n_views;
	uint64_t valid = c->valid;
	double t0 = now_ms();
	entry_name(c, c->res_ids, valid, c->res_session, name);
	int efd = open_dir_at(c->spill.dfd, name, 1);
	if (efd < 0) {
		moor_errf(err, "spill: entry %s: %s", name, moor_strerror(efd));
		return efd;
	}
	(void)dfile_sync_dir(c->spill.dfd, NULL);
	char why[MOOR_ERRLEN];
	man_view old = {0};
	int have_old = man_load(c, efd, &old, why) == 0;
	/* The save's files land beside the entry's until its commit: on a
	 * disk with less room than the whole conversation could take (its
	 * rows and anchors, raw, as if no block were kept), this save is not
	 * tried and the entry on the disk is kept as it is (a save that
	 * failed for room would keep it too, after taking the room of other
	 * writes meanwhile). A new entry is tried whatever the room: its
	 * failure costs nothing that was there. */
	if (have_old) {
		struct statvfs sv;
		uint64_t need =
		    codec_bound(valid * c->row_bytes) +
		    (SPILL_ANCHORS + 1) * codec_bound(c->sec_bytes) +
		    (1u << 20);
		uint64_t fr = fstatvfs(c->spill.dfd, &sv) == 0
				  ? (uint64_t)sv.f_bavail * sv.f_frsize
				  : UINT64_MAX;
		if (fr < need) {
			moor_errf(err,
				  "spill: entry %s not written: %.1f MB free, "
				  "the save may need %.1f MB; the entry on the "
				  "disk (%llu tokens) is kept as it is",
				  name, (double)fr / 1e6, (double)need / 1e6,
				  (unsigned long long)old.m->valid);
			free(old.buf);
			close(efd);
			c->spill.k.save_skipped_room++;
			return MOOR_ENOSPACE;
		}
	}
	/* the anchors: the newest 4 at or below valid */
	uint64_t lines[SPILL_ANCHORS];
	uint64_t offs[SPILL_ANCHORS];
	uint32_t n_anc = 0;
	for (int i = (int)c->n_anc - 1; i >= 0 && n_anc < SPILL_ANCHORS; i--)
		if (c->anc[i].line <= valid) {
			lines[n_anc] = c->anc[i].line;
			offs[n_anc++] = c->anc[i].off;
		}
	for (uint32_t i = 0; i < n_anc / 2; i++) { /* ascending */
		uint64_t t = lines[i], u = offs[i];
		lines[i] = lines[n_anc - 1 - i];
		offs[i] = offs[n_anc - 1 - i];
		lines[n_anc - 1 - i] = t;
		offs[n_anc - 1 - i] = u;
	}
	int end = c->end.have && c->end.len <= valid;
	uint64_t n_blk = (valid + SPILL_BLK - 1) / SPILL_BLK;
	size_t slen = c->res_session ? strlen(c->res_session) + 1 : 0;
	uint32_t n_mk = 0;
	cache_mark *mk = cache_marks_copy(c, valid, &n_mk);
	uint64_t mlen = sizeof(spill_hdr) + sizeof(spill_man) + pad8(slen) +
			pad8(valid * 4) + n_blk * (2 + 2ull * nv) * 8 +
			n_anc * (1 + 2ull * ns) * 8 +
			(end ? 2ull * ns * 8 : 0) + n_mk * 24ull + 8;
	char *mb = calloc(1, mlen);
	/* the staging buffer: a block, or an anchor's sections off a CUDA
	 * arena (secs_host) */
	uint64_t bbytes = SPILL_BLK * c->row_bytes;
	uint64_t big = bbytes > c->sec_bytes ? bbytes : c->sec_bytes, soff;
	void *stage = stage_new(c, big, &soff);
	/* the block check where the bytes are: run[v], the views of one run
	 * a block (outer 1), n_run of them (0: every block staged); norun,
	 * the others */
	int devsums = devsums_on(c);
	uint8_t *run = calloc(2, nv ? nv : 1), *norun = run ? run + nv : NULL;
	uint32_t n_run = 0;
	for (uint32_t v = 0; run && devsums && v < nv; v++) {
		run[v] = c->vg[v].outer == 1;
		norun[v] = !run[v];
		n_run += run[v];
	}
	int rc = mb && stage && run ? 0 : -ENOMEM;
	spill_hdr *mh = (spill_hdr *)mb;
	spill_man *m = mb ? (spill_man *)(mh + 1) : NULL;
	uint64_t o = sizeof(spill_hdr) + sizeof(spill_man);
	uint64_t *blk = NULL, *anc = NULL, *es = NULL;
	if (!rc) {
		hdr_fill(c, mh, SF_MANIFEST, 0, valid, 0, 0);
		m->valid = valid;
		m->taint = c->taint;
		m->end_len = end ? c->end.len : 0;
		m->end_taint = end ? c->end.taint : CACHE_NO_TAINT;
		m->n_blk = n_blk;
		m->n_anc = n_anc;
		m->session_len = slen;
		m->saved_at = (uint64_t)time(NULL);
		if (slen)
			memcpy(mb + o, c->res_session, slen);
		o += pad8(slen);
		memcpy(mb + o, c->res_ids, valid * 4);
		o += pad8(valid * 4);
		blk = (uint64_t *)(mb + o);
		o += n_blk * (2 + 2ull * nv) * 8;
		anc = (uint64_t *)(mb + o);
		o += n_anc * (1 + 2ull * ns) * 8;
		es = end ? (uint64_t *)(mb + o) : NULL;
		o += end ? 2ull * ns * 8 : 0;
		m->n_mk = n_mk;
		for (uint32_t i = 0; i < n_mk; i++) { /* no padding bytes */
			char *q = mb + o + 24ull * i;
			memcpy(q, &mk[i].start, 8);
			memcpy(q + 8, &mk[i].len, 8);
			memcpy(q + 16, &mk[i].kind, 4);
		}
	}
	free(mk);
	/* the free-space floor, before a byte of the entry changes: older
	 * entries make the room, or this save is not made (the entry on the
	 * disk, if any, stays as it is) */
	uint64_t need = 0, fr = 0;
	if (!rc) {
		need = save_need(c, efd, have_old ? &old : NULL, valid, lines,
				 n_anc, end, mlen);
		if (floor_room(c, name, need, &fr)) {
			floor_said(c, err, fr, need, name, valid,
				   have_old ? "not written (the entry on the "
					      "disk is kept as it is)"
					    : "not written");
			if (have_old)
				free(old.buf);
			free(mb);
			free(run);
			stage_free(c, stage, soff);
			close(efd);
			if (!have_old) /* the directory made for it */
				(void)dfile_rm_rf(c->spill.dfd, name);
			return MOOR_ENOSPACE;
		}
	}
	uint64_t written0 = c->spill.k.bytes_written;
	uint64_t old_valid = have_old ? old.m->valid : 0;
	int committing = 0; /* the manifest removed: a failure costs it */
	/* the blocks, the anchors and the end through the two stages (the
	 * pipeline above): encoded here, written by the writer */
	spill_pipe pp = {0};
	host_cp hc;
	hc_init(&hc, c);
	uint64_t pbig = cache_max64(bbytes, c->sec_bytes);
	if (!rc)
		rc = pipe_open(&pp, c, efd, name, valid,
			       n_blk + n_anc + (end ? 1 : 0), pbig, err);
	for (uint64_t j = 0; j < n_blk && !rc; j++) {
		uint64_t a = j * SPILL_BLK,
			 rows = cache_min64(SPILL_BLK, valid - a);
		uint64_t *e = blk + j * (2 + 2ull * nv);
		sw_slot *s;
		rc = pipe_slot(&pp, &s);
		if (rc)
			break;
		e[0] = rows;
		e[1] = XXH3_64bits(c->res_ids + a, rows * 4);
		snprintf(s->name, sizeof s->name, "r%llu",
			 (unsigned long long)j);
		const uint64_t *ob = have_old && j < old.m->n_blk
					 ? old.blk + j * (2 + 2ull * nv)
					 : NULL;
		/* the same rows and ids, its file there: kept if its sums
		 * are the manifest's */
		int maybe = ob && ob[0] == e[0] && ob[1] == e[1] &&
			    file_exists(efd, s->name);
		if (maybe && n_run) { /* the sums where the bytes are */
			rc = blk_sums_dev(c, stage, run, norun, n_run, a, rows,
					  e + 2);
			if (rc)
				break;
			if (!memcmp(ob + 2, e + 2, 2ull * nv * 8)) {
				c->spill.k.blocks_kept++;
				c->spill.k.blocks_unread += n_run == nv;
				continue;
			}
			/* changed: the views summed in place join the
			 * stage */
			rc = stage_views(c, stage, a, rows, run);
		} else {
			rc = hc_rows(&hc, 1, stage, rows, 0, a, rows);
			if (!rc) /* the mover's copies are done before the
				  * host reads */
				rc = cache_sync(c);
			if (!rc)
				blk_sums(c, stage, rows, e + 2);
			if (!rc && maybe &&
			    !memcmp(ob + 2, e + 2, 2ull * nv * 8)) {
				c->spill.k.blocks_kept++;
				continue;
			}
		}
		if (rc)
			break;
		hdr_fill(c, &s->h, SF_BLOCK, j, rows, 2ull * nv,
			 rows * c->row_bytes);
		s->p[0] = (dfile_part){&s->h, sizeof s->h};
		s->p[1] = (dfile_part){e + 2, 2ull * nv * 8};
		rc = data_part(c, &s->h, stage, rows * c->row_bytes,
			       slot_out(s, 2ull * nv), &s->p[2]);
		if (rc)
			break;
		s->kind = SF_BLOCK;
		s->bytes = sizeof s->h + 2ull * nv * 8 + s->p[2].n;
		pipe_put(&pp, s);
	}
	for (uint32_t i = 0; i < n_anc && !rc; i++) {
		uint64_t *e = anc + i * (1 + 2ull * ns);
		e[0] = lines[i];
		const uint64_t *os = NULL;
		for (uint64_t k = 0; have_old && k < old.m->n_anc; k++)
			if (old.anc[k * (1 + 2ull * ns)] == lines[i])
				os = old.anc + k * (1 + 2ull * ns) + 1;
		rc = save_secs(c, &pp, stage, devsums, SF_ANCHOR, lines[i],
			       offs[i], e + 1, os);
	}
	if (end && !rc)
		rc = save_secs(c, &pp, stage, devsums, SF_END, c->end.len,
			       c->end.off, es, have_old ? old.end : NULL);
	/* where the time went: the encoder's own (copies, sums, codec), the
	 * writer's files, and the encoder's waits for the writer (a slot,
	 * then the last files) */
	double enc_ms = 0, wr_ms = 0, wait_ms = 0;
	if (pp.c) { /* opened: the writer joined, every outcome collected */
		double t1 = now_ms();
		int prc = pipe_close(&pp, rc != 0);
		if (!rc)
			rc = prc;
		/* serial, the writer's files ran on this thread */
		enc_ms = t1 - pp.t0 - pp.wait_ms - (pp.serial ? pp.wr_ms : 0);
		wr_ms = pp.wr_ms;
		wait_ms = pp.wait_ms + (now_ms() - t1);
	}
	if (have_old)
		free(old.buf);
	if (!rc) {
		committing = 1;
		rc = save_commit(&pp, err);
	}
	if (!rc) {
		save_prune(efd, n_blk, lines, n_anc, end);
		rc = dfile_sync_dir(efd, err);
	}
	if (!rc) {
		uint64_t sum = XXH3_64bits(mb, mlen - 8);
		memcpy(mb + mlen - 8, &sum, 8);
		dfile_part p = {mb, mlen};
		rc = floor_file(c, name, valid, mlen, err);
		if (!rc)
			rc = dfile_write(efd, "manifest", &p, 1, 0, err);
		if (!rc)
			c->spill.k.bytes_written += mlen;
	}
	free(mb);
	/* the write guard's count: what reached the drive, failed or not */
	cache_ledger_wrote(c, CACHE_LEDGER_SPILL,
			   c->spill.k.bytes_written - written0);
	(void)cache_sync(c); /* a copy into stage a failure left in flight */
	stage_free(c, stage, soff);
	hc_fini(&hc);
	free(run);
	if (rc && !committing)
		pipe_unland(&pp);
	pipe_free(&pp);
	close(efd);
	if (rc && !committing && have_old) {
		/* nothing of the entry was touched: it stays as it was */
		char e0[MOOR_ERRLEN];
		snprintf(e0, sizeof e0, "%s", err[0] ? err : moor_strerror(rc));
		moor_errf(err,
			  "spill: the save of %s (%llu tokens) failed: %s; the "
			  "entry on the disk (%llu tokens) is kept as it was",
			  name, (unsigned long long)valid, e0,
			  (unsigned long long)old_valid);
		c->spill.k.save_failed++;
		return rc;
	}
	if (rc) {
		/* an entry without its manifest: the next open deletes it,
		 * and so does this */
		entry_delete(c, name, "its save failed");
		c->spill.k.save_failed++;
		return rc;
	}
	c->spill.k.saves++;
	c->spill.last_save_ms = now_ms() - t0;
	index_load(c, name);
	moor_info("[spill] saved %s: %llu tokens (end %s, %u anchors, taint "
		  "%lld), %llu bytes written in %.1f ms (encoder %.1f ms, "
		  "writer %.1f ms%s, waits for the writer %.1f ms; %u of %u "
		  "files O_DIRECT)",
		  name, (unsigned long long)valid, end ? "kept" : "none", n_anc,
		  c->taint == CACHE_NO_TAINT ? -1ll : (long long)c->taint,
		  (unsigned long long)(c->spill.k.bytes_written - written0),
		  c->spill.last_save_ms, enc_ms, wr_ms,
		  pp.serial ? ", serial" : "", wait_ms, pp.n_direct,
		  pp.n_landed);
	spill_budget(c, name);
	return 0;
}

/* A save with the disk tier's writer held off (it waits between two of
 * its files). */
static int save_resident(cache *c, char name[17], char *err)
{
	cache_disk_spill_active(c, 1);
	int rc = save_conv(c, name, err);
	cache_disk_spill_active(c, 0);
	return rc;
}

/* The parked conversation at the drain, after the resident one is
 * written: swapped into the live buffers (nothing is parked in its place:
 * the rows in place are on the disk already) and written as an entry of
 * its own, which a later prompt of it is offered (spill_offer). Skipped,
 * and said, when its head is not the rows in place or its entry would
 * take the resident's name (no session keys: both are named by the same
 * first chunk). A failure costs the parked conversation only. */
static void drain_park(cache *c, const char *res_name)
{
	cache_span *P = &c->park;
	if (!P->have || !P->n_anc)
		return;
	char name[17], err[MOOR_ERRLEN] = "";
	entry_name(c, P->ids, P->top, P->session, name);
	if (!strcmp(name, res_name) ||
	    cache_common_prefix(c->res_ids, c->valid, P->ids, P->top) <
		P->base) {
		moor_info("[spill] drain: the parked conversation (%llu "
			  "tokens) is not written: %s",
			  (unsigned long long)P->top,
			  strcmp(name, res_name)
			      ? "its head is not the rows in place"
			      : "it has no session key of its own");
		return;
	}
	int hi = 0;
	for (uint32_t i = 1; i < P->n_anc; i++)
		if (P->anc[i].line > P->anc[hi].line ||
		    (P->anc[i].line == P->anc[hi].line && P->anc[i].end))
			hi = (int)i;
	uint64_t top = P->top, line = P->anc[hi].line, taint = P->taint;
	int end = P->anc[hi].end;
	char *session = cache_str_dup(P->session);
	memcpy(c->res_ids, P->ids, top * sizeof *P->ids);
	/* the rows in place above the head go (they are written): nothing
	 * is parked in the swap */
	c->valid = P->base;
	int rc = cache_park_swap(c, hi, c->cfg.mem_ceiling);
	if (!rc) {
		c->valid = top;
		c->taint = taint;
		free(c->res_session);
		c->res_session = session;
		session = NULL;
		c->end.have = 0;
		if (end)
			rc = cache_end_keep(c, line, taint);
	}
	free(session);
	if (!rc)
		rc = save_resident(c, name, err);
	if (rc)
		moor_warn("[spill] drain: the parked conversation: %s",
			  err[0] ? err : moor_strerror(rc));
}

int cache_drain(cache *c, char *err)
{
	if (!c->spill.on || !c->have_layout)
		return 0;
	if (c->t.active)
		cache_turn_abort(c, 0, c->t.start);
	if (c->stash.have && cache_stash_restore(c))
		return 0; /* the resident rows are not whole: nothing to keep */
	if (c->valid == 0) {
		moor_info("[spill] drain: no resident conversation");
		return 0;
	}
	char name[17];
	int rc = save_resident(c, name, err);
	if (rc)
		return rc;
	dfile_part p = {name, 16};
	rc = dfile_write(c->spill.dfd, "resident", &p, 1, 0, err);
	if (!rc)
		drain_park(c, name);
	return rc;
}

/* ---- read back: a reader and the checks ----
 *
 * A read-back (the attach's, load_entry; a plan's restore, spill_restore)
 * names its files first, in the order it uses them (the anchors, the
 * end, the blocks: see load_entry), each with what its header must say
 * and the manifest's sums. A reader thread of the read-back's own reads file
 * i + 1 whole (dfile_read_direct: O_DIRECT where taken) into one of two
 * 4 KiB-aligned buffers (c->spill.cws's 0 and 1, the save's slots, kept
 * between calls) while this thread checks file i: its header against the
 * manifest, its frames decoded into the staging buffer on the pool (or its
 * raw bytes copied there), the sums it carries, then the sums of its bytes
 * (on the pool) against the manifest's; then the bytes are copied into the
 * live buffers as before. A buffer goes back to the reader once the file
 * in it is decoded, so the read of i + 2 starts while i is summed and
 * copied. The read costs the drive's time, the rest the cores' (decode and
 * sums on the pool, the copies by the mover or on the pool): overlapped,
 * a read-back takes about the longer of the two, where one after the
 * other it took their sum (issue 11: the serial read-back ran at 28% of
 * the drive's O_DIRECT read on the 16-core host, its reads a third of its
 * time). Buffer 1 is held from the first read-back on, as from the first
 * save (a slot: the largest file's bytes, about 150 MiB on the 27B).
 *
 * Threads and ownership:
 *   - buffer b is the reader's while FREE: it reads into it and writes
 *     its outcome (rc, size, err, ms) beside it, then marks it READY
 *     under rd.mu; it is this thread's while READY, until rd_put marks it
 *     FREE again (under mu). So the read's bytes happen before the checks
 *     read them, and the checks' reads before the next read into it: no
 *     atomics, no other lock;
 *   - the reader reads the files in order, file i into buffer i & 1 once
 *     that buffer is FREE (file i - 2 given back): it never waits for a
 *     file this thread has not reached, and this thread waits only for
 *     the file the reader reads next or has read, so both progress;
 *   - the reader touches of the cache only the entry's directory (efd)
 *     and its list of files (written before it starts); the counters, the
 *     pool, the codec's planes, the staging buffer, the mover and the
 *     live buffers are this thread's;
 *   - a read's failure is this thread's when it reaches that file, in
 *     order, so the error said is the serial path's. A file that fails a
 *     check is not given back; rd_close stops the reader (no read starts
 *     after `stop`) and joins it before the buffers are touched again.
 *     The file after a failed one may have been read meanwhile, never
 *     used: the one effect the serial path does not have (none on the
 *     disk or the cache);
 *   - dfile's fault seam (DFILE_OP_READ) is called by the reader alone
 *     while it runs.
 * MOOR_SPILL_READER=0 (a measuring switch, as MOOR_SPILL_WRITER=0 is for
 * the save) reads each file on this thread when it is reached, into
 * buffer 0: the serial read-back of before. The checks and their order,
 * the copies and their order, and so the live buffers after it, are the
 * same either way; test_spill_reader compares the two. */

typedef struct rd_file {
	char name[32];	      /* r<j>, a<line>, end */
	uint32_t kind;	      /* SF_BLOCK, SF_ANCHOR, SF_END */
	uint64_t index, rows; /* what its header must say */
	uint64_t n_sums;      /* 2 a view (a block) or a section */
	const uint64_t *sums; /* the manifest's [n_sums] */
	uint64_t data;	      /* its decoded bytes */
	uint64_t cap;	      /* the read's: the file up to its largest */
} rd_file;

enum { RD_FREE = 0, RD_READY };

typedef struct rd_buf {
	int state;  /* RD_*, under mu */
	uint32_t i; /* the file read into it */
	int rc;	    /* its read's */
	uint64_t n; /* its bytes read */
	double ms;
	char err[MOOR_ERRLEN];
} rd_buf;

typedef struct spill_rd {
	cache *c;
	int efd;
	rd_file *f; /* [n], in the order they are used */
	uint32_t n, cap_f;
	char *buf[2]; /* aligned in c->spill.cws's buffers 0 and 1 */
	rd_buf s[2];
	int threaded; /* a reader thread runs (else reads as reached) */
	int serial;   /* no reader thread ran (said in the log) */
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int stop;	/* under mu */
	double read_ms; /* the reads' (the reader's, under mu) */
	/* the reads' first start and last end (rd_read's: read after
	 * rd_close), rd_open's and rd_close's times: the drive's idle head
	 * and tail in the log line */
	double t_first, t_last, t_open, t_close;
	double stall_ms; /* the reader's waits for a buffer (under mu) */
	/* this thread's: where its time went */
	double wait_ms, dec_ms, sum_ms, copy_ms;
	uint32_t used; /* files checked */
	host_cp hc;    /* the copies into the live buffers */
} spill_rd;

/* The bytes of a read-back's buffer, and of a save's slot: a file's
 * header and sums and its largest data part encoded, to 4 KiB, and room
 * to align it: one size, so that neither regrows the other's. */
static uint64_t slot_bytes(const cache *c)
{
	uint64_t big = cache_max64(SPILL_BLK * c->row_bytes, c->sec_bytes);
	return dfile_up4k(SLOT_PRE + codec_bound(big)) + DFILE_ALIGN;
}

static int rd_open(spill_rd *r, cache *c, int efd, uint32_t max_files)
{
	memset(r, 0, sizeof *r);
	r->c = c;
	r->efd = efd;
	r->f = calloc(max_files ? max_files : 1, sizeof *r->f);
	r->cap_f = max_files;
	r->t_open = now_ms();
	hc_init(&r->hc, c);
	return r->f ? 0 : -ENOMEM;
}

/* Names the next file of the read-back (before rd_start). */
static void rd_add(spill_rd *r, const char *name, uint32_t kind, uint64_t index,
		   uint64_t rows, uint64_t n_sums, const uint64_t *sums,
		   uint64_t data)
{
	MOOR_ASSERT(r->n < r->cap_f);
	rd_file *f = &r->f[r->n++];
	snprintf(f->name, sizeof f->name, "%s", name);
	f->kind = kind;
	f->index = index;
	f->rows = rows;
	f->n_sums = n_sums;
	f->sums = sums;
	f->data = data;
	f->cap = dfile_up4k(sizeof(spill_hdr) + n_sums * 8 + codec_bound(data));
}

static void rd_read(spill_rd *r, uint32_t i, int b)
{
	rd_buf *s = &r->s[b];
	double t0 = now_ms();
	s->i = i;
	s->err[0] = 0;
	s->n = 0;
	s->rc = dfile_read_direct(r->efd, r->f[i].name, r->buf[b], r->f[i].cap,
				  &s->n, NULL, s->err);
	r->t_last = now_ms();
	s->ms = r->t_last - t0;
	if (!i)
		r->t_first = t0;
}

static void *rd_main(void *arg)
{
	spill_rd *r = arg;
	pthread_mutex_lock(&r->mu);
	for (uint32_t i = 0; i < r->n; i++) {
		rd_buf *s = &r->s[i & 1];
		double t0 = now_ms();
		while (!r->stop && s->state != RD_FREE)
			pthread_cond_wait(&r->cv, &r->mu);
		r->stall_ms += now_ms() - t0;
		if (r->stop)
			break;
		pthread_mutex_unlock(&r->mu);
		rd_read(r, i, (int)(i & 1));
		pthread_mutex_lock(&r->mu);
		r->read_ms += s->ms;
		s->state = RD_READY;
		pthread_cond_broadcast(&r->cv);
	}
	pthread_mutex_unlock(&r->mu);
	return NULL;
}

/* The buffers, and the reader unless MOOR_SPILL_READER=0 (or no thread
 * can be had: the serial read-back, slower, as sound). */
static int rd_start(spill_rd *r)
{
	cache *c = r->c;
	uint64_t nb = slot_bytes(c);
	const char *e = getenv("MOOR_SPILL_READER");
	int want = !(e && !strcmp(e, "0")) && r->n > 1;
	r->serial = 1;
	for (int b = 0; b < (want ? 2 : 1); b++) {
		char *p = codec_ws_buf(&c->spill.cws, b, nb);
		if (!p)
			return -ENOMEM;
		r->buf[b] = p + (-(uintptr_t)p & (DFILE_ALIGN - 1));
	}
	for (uint32_t i = 0; i < r->n; i++)
		MOOR_ASSERT(r->f[i].cap + DFILE_ALIGN <= nb);
	r->threaded = want && worker_start(&r->mu, &r->cv, &r->th, rd_main, r);
	r->serial = !r->threaded;
	return 0;
}

/* File i read (waited for, or read now): its buffer and size; 0, or its
 * read's error (said in why). */
static int rd_get(spill_rd *r, uint32_t i, char **b, uint64_t *n, char *why)
{
	int k = r->threaded ? (int)(i & 1) : 0;
	rd_buf *s = &r->s[k];
	if (r->threaded) {
		double t0 = now_ms();
		pthread_mutex_lock(&r->mu);
		while (s->state != RD_READY)
			pthread_cond_wait(&r->cv, &r->mu);
		pthread_mutex_unlock(&r->mu);
		r->wait_ms += now_ms() - t0;
	} else {
		rd_read(r, i, 0);
		r->read_ms += s->ms;
	}
	MOOR_ASSERT(s->i == i);
	*b = r->buf[k];
	*n = s->n;
	if (s->rc)
		snprintf(why, MOOR_ERRLEN, "%s", s->err);
	return s->rc;
}

/* File i's buffer back to the reader (its bytes are no longer read). */
static void rd_put(spill_rd *r, uint32_t i)
{
	if (!r->threaded)
		return;
	pthread_mutex_lock(&r->mu);
	r->s[i & 1].state = RD_FREE;
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
}

/* Stops the reader (no read starts after this) and joins it. */
static void rd_close(spill_rd *r)
{
	if (r->threaded) {
		pthread_mutex_lock(&r->mu);
		r->stop = 1;
		pthread_cond_broadcast(&r->cv);
		pthread_mutex_unlock(&r->mu);
		worker_join(&r->mu, &r->cv, r->th);
		r->threaded = 0;
	}
	r->t_close = now_ms();
	free(r->f);
	r->f = NULL;
	hc_fini(&r->hc);
}

static int sums_check(const uint64_t *want, const uint64_t *got, uint64_t n,
		      const char *name, char *why)
{
	if (memcmp(want, got, n * 8)) {
		moor_errf(why, "%s: its bytes do not sum to what was written",
			  name);
		return MOOR_EFORMAT;
	}
	return 0;
}

/* File i of the read-back into dst (its data bytes), checked against the
 * manifest: its header, the sums it carries, then the sums of its bytes
 * (got: 2 a view for a block, 2 a section else, as the manifest's). A
 * file longer than its header says is read as far as its header says
 * (what the reads of its three parts did); shorter, MOOR_ETRUNC. */
static int rd_file_in(spill_rd *r, uint32_t i, void *dst, uint64_t *got,
		      char *why)
{
	cache *c = r->c;
	const rd_file *f = &r->f[i];
	spill_hdr h;
	uint64_t pre = sizeof h + f->n_sums * 8, n;
	char *b;
	int rc = rd_get(r, i, &b, &n, why);
	if (rc)
		return rc;
	r->used++;
	if (n < sizeof h) {
		moor_errf(why, "read %s: %s", f->name,
			  moor_strerror(MOOR_ETRUNC));
		return MOOR_ETRUNC;
	}
	memcpy(&h, b, sizeof h);
	if (h.magic != SPILL_MAGIC || h.version != SPILL_VERSION ||
	    h.kind != f->kind || h.index != f->index || h.rows != f->rows ||
	    h.digest != c->spill.digest || h.n_sums != f->n_sums ||
	    h.raw != f->data || h.codec > 1 ||
	    (h.codec == 0 && h.data != f->data) ||
	    (h.codec == 1 && h.data > codec_bound(f->data)) ||
	    !cache_ledger_fp_ok(c, h.fp)) {
		moor_errf(why, "%s: its header is not the manifest's", f->name);
		return MOOR_EFORMAT;
	}
	if (n < pre + h.data) {
		moor_errf(why, "read %s: %s", f->name,
			  moor_strerror(MOOR_ETRUNC));
		return MOOR_ETRUNC;
	}
	double t0 = now_ms();
	if (!h.codec) {
		host_memcpy(c, dst, b + pre, f->data);
	} else {
		rc = codec_decode(b + pre, h.data, dst, f->data, c->spill.pool,
				  &c->spill.cws);
		if (rc) {
			moor_errf(why, "%s: its frames do not decode", f->name);
			return rc;
		}
	}
	double t1 = now_ms();
	r->dec_ms += t1 - t0;
	if (memcmp(b + sizeof h, f->sums, f->n_sums * 8)) {
		moor_errf(why, "%s: its sums are not the manifest's", f->name);
		return MOOR_EFORMAT;
	}
	rd_put(r, i); /* the next read into its buffer may start */
	c->spill.k.bytes_read += pre + h.data;
	if (f->kind == SF_BLOCK)
		blk_sums(c, dst, f->rows, got);
	else
		secs_sums(c, dst, got);
	r->sum_ms += now_ms() - t1;
	return sums_check(f->sums, got, f->n_sums, f->name, why);
}

/* Where a read-back's time went, for its log line. */
static void rd_said(const spill_rd *r, char *out, size_t n)
{
	snprintf(out, n,
		 "reads %.1f ms, waits for the reader %.1f, decode %.1f, sums "
		 "%.1f, copies %.1f; the reader's waits for a buffer %.1f, no "
		 "read before the first %.1f ms, after the last %.1f; %u "
		 "files%s",
		 r->read_ms, r->wait_ms, r->dec_ms, r->sum_ms, r->copy_ms,
		 r->stall_ms, r->t_first > 0 ? r->t_first - r->t_open : 0.0,
		 r->t_last > 0 ? r->t_close - r->t_last : 0.0, r->used,
		 r->serial && r->n > 1 ? ", serial" : "");
}

/* Names block j of the entry (its rows, the manifest's sums). */
static void rd_add_blk(spill_rd *r, const man_view *mv, uint64_t j)
{
	cache *c = r->c;
	uint32_t nv = c->lay->n_views;
	uint64_t a = j * SPILL_BLK,
		 rows = cache_min64(SPILL_BLK, mv->m->valid - a);
	char bn[32];
	snprintf(bn, sizeof bn, "r%llu", (unsigned long long)j);
	rd_add(r, bn, SF_BLOCK, j, rows, 2ull * nv,
	       mv->blk + j * (2 + 2ull * nv) + 2, rows * c->row_bytes);
}

/* Names anchor i of the entry (the manifest's i-th). */
static void rd_add_anc(spill_rd *r, const man_view *mv, uint64_t i)
{
	cache *c = r->c;
	uint32_t ns = c->lay->n_sections;
	const uint64_t *e = mv->anc + i * (1 + 2ull * ns);
	char an[32];
	snprintf(an, sizeof an, "a%llu", (unsigned long long)e[0]);
	rd_add(r, an, SF_ANCHOR, e[0], 0, 2ull * ns, e + 1, c->sec_bytes);
}

/* A read-back names its sections' files (the anchors, the end) before its
 * blocks. Its last file's checks and copies come after the reader's last
 * read, with the drive idle: a block's take less time than a block's
 * read, the sections' (150 MiB on the 27B: decode, sums, copies) more.
 * Named first, the sections are checked and copied while the reader reads
 * the blocks. On the GPU host (32,903 tokens, 35 files), with the end and
 * then one short block last, the drive stood idle 31 to 43 ms after its
 * last read (the reads: 926 ms); with the sections first, 5 ms. */
static int load_entry(cache *c, int efd, const man_view *mv, char *said,
		      char *why)
{
	uint32_t ns = c->lay->n_sections, nv = c->lay->n_views;
	const spill_man *m = mv->m;
	uint64_t bbytes = SPILL_BLK * c->row_bytes;
	uint64_t big = bbytes > c->sec_bytes ? bbytes : c->sec_bytes, soff;
	void *stage = stage_new(c, big, &soff);
	uint64_t *got = malloc((2ull * (ns > nv ? ns : nv) + 2) * 8);
	spill_rd r;
	int rc = rd_open(&r, c, efd, (uint32_t)(m->n_blk + m->n_anc + 1));
	if (!stage || !got || rc) {
		stage_free(c, stage, soff);
		free(got);
		rd_close(&r);
		return -ENOMEM;
	}
	for (uint64_t i = 0; i < m->n_anc; i++)
		rd_add_anc(&r, mv, i);
	if (m->end_len)
		rd_add(&r, "end", SF_END, m->end_len, 0, 2ull * ns, mv->end,
		       c->sec_bytes);
	for (uint64_t j = 0; j < m->n_blk; j++)
		rd_add_blk(&r, mv, j);
	rc = rd_start(&r);
	for (uint32_t fi = 0; fi < r.n && !rc; fi++) {
		const rd_file *f = &r.f[fi];
		if (f->kind == SF_BLOCK) {
			const uint64_t *e =
			    mv->blk + f->index * (2 + 2ull * nv);
			uint64_t a = f->index * SPILL_BLK;
			if (e[0] != f->rows ||
			    e[1] != XXH3_64bits(mv->ids + a, f->rows * 4)) {
				moor_errf(why,
					  "%s: the manifest's rows or ids hash",
					  f->name);
				rc = MOOR_EFORMAT;
				break;
			}
		}
		rc = rd_file_in(&r, fi, stage, got, why);
		double t0 = now_ms();
		if (!rc && f->kind == SF_BLOCK)
			rc = hc_rows(&r.hc, 0, stage, f->rows, 0,
				     f->index * SPILL_BLK, f->rows);
		else if (!rc && f->kind == SF_ANCHOR)
			rc = hc_adopt(&r.hc, f->index, stage,
				      c->cfg.mem_ceiling);
		else if (!rc)
			rc = hc_end(&r.hc, stage, m->end_len, m->end_taint);
		if (!rc) /* the copies out of stage are done before its reuse */
			rc = cache_sync(c);
		r.copy_ms += now_ms() - t0;
	}
	rd_close(&r);
	/* every copy done (out of stage, and the end's on the device) before
	 * stage goes and before the caller hands the rows to the engine */
	int sr = cache_sync(c);
	if (!rc)
		rc = sr;
	stage_free(c, stage, soff);
	free(got);
	rd_said(&r, said, MOOR_ERRLEN);
	return rc;
}

int cache_spill_read_back(cache *c)
{
	if (!c->spill.on)
		return 0;
	index_clear(c);
	c->spill.digest = cache_tier_layout_digest(c->lay, SPILL_VERSION);
	char why[MOOR_ERRLEN] = "";
	/* entries another engine's rows filled cannot be read by this one */
	ent_info *v;
	int n = list_entries(c, &v);
	for (int i = 0; i < n; i++) {
		int fd = open_dir_at(c->spill.dfd, v[i].name, 0);
		if (fd < 0)
			continue;
		man_view mv = {0};
		int rc = man_load(c, fd, &mv, why);
		close(fd);
		if (rc == MOOR_EVERSION) {
			entry_delete(c, v[i].name, why);
			c->spill.k.swept++;
		} else if (!rc) {
			index_put(c, v[i].name, &mv);
			free(mv.buf);
		}
	}
	free(v);
	char name[17] = "";
	void *nb;
	uint64_t nn;
	int rc = dfile_read(c->spill.dfd, "resident", 64, &nb, &nn, why);
	if (rc) {
		if (rc != -ENOENT)
			moor_warn("[spill] %s", why);
		return 0;
	}
	if (nn == 16) {
		memcpy(name, nb, 16);
		name[16] = 0;
	}
	free(nb);
	unlinkat(c->spill.dfd, "resident", 0);
	if (!name[0] || strspn(name, "0123456789abcdef") != 16)
		return 0;
	int efd = open_dir_at(c->spill.dfd, name, 0);
	if (efd < 0) {
		moor_info("[spill] the drained entry %s is gone", name);
		return 0;
	}
	double t0 = now_ms();
	man_view mv = {0};
	char said[MOOR_ERRLEN] = "";
	rc = man_load(c, efd, &mv, why);
	if (!rc) {
		rc = load_entry(c, efd, &mv, said, why);
		if (!rc) {
			memcpy(c->res_ids, mv.ids, mv.m->valid * 4);
			c->valid = mv.m->valid;
			c->taint = mv.m->taint < c->valid ? mv.m->taint
							  : CACHE_NO_TAINT;
			free(c->res_session);
			c->res_session = cache_str_dup(mv.session);
			cache_marks_cut(c, 0);
			for (uint64_t i = 0; i < mv.m->n_mk; i++)
				(void)cache_marks_add(c, mv.mk[i].start,
						      mv.mk[i].len,
						      mv.mk[i].kind);
		}
	}
	close(efd);
	if (rc) {
		/* nothing of it is trusted: the live buffers start empty */
		cache_anchors_clear(c);
		cache_end_release(c);
		c->valid = 0;
		c->taint = CACHE_NO_TAINT;
		(void)cache_secs_zero(c);
		(void)cache_sync(c);
		if (mv.buf)
			free(mv.buf);
		moor_warn("[spill] the restore of %s failed: %s", name,
			  why[0] ? why : moor_strerror(rc));
		entry_delete(c, name, "its restore failed");
		c->spill.k.restore_failed++;
		return 0;
	}
	uint64_t end_len = mv.m->end_len;
	free(mv.buf);
	/* the manifest's mtime is the entry's last use (the LRU's order) */
	int mfd = openat(c->spill.dfd, name, O_RDONLY | O_DIRECTORY);
	if (mfd >= 0) {
		(void)utimensat(mfd, "manifest", NULL, 0);
		close(mfd);
	}
	c->spill.k.restores++;
	c->spill.last_restore_ms = now_ms() - t0;
	moor_info("[spill] read back %s: %llu tokens (end anchor at %llu, %u "
		  "anchors) in %.1f ms (%s)",
		  name, (unsigned long long)c->valid,
		  (unsigned long long)end_len, c->n_anc,
		  c->spill.last_restore_ms, said);
	return 0;
}

static int spill_clear(cache *c)
{
	if (!c->spill.on)
		return 0;
	ent_info *v;
	int n = list_entries(c, &v);
	for (int i = 0; i < n; i++)
		entry_delete(c, v[i].name, "cleared");
	free(v);
	unlinkat(c->spill.dfd, "resident", 0);
	index_clear(c);
	return 0;
}

static void spill_stats(cache *c, uint64_t *entries, uint64_t *bytes)
{
	*entries = *bytes = 0;
	if (!c->spill.on)
		return;
	ent_info *v;
	int n = list_entries(c, &v);
	for (int i = 0; i < n; i++) {
		(*entries)++;
		*bytes += v[i].bytes;
	}
	free(v);
}

/* ---- the planner's side: offer, restore, eviction ---- */

/* The rate its offer weighs a read at: the last restore's, else 2 GB/s. */
static double spill_read_bps(cache *c)
{
	return c->spill.read_bps > 0 ? c->spill.read_bps : 2e9;
}

/* The planner's offer: the entry whose end anchor (or, below it, a saved
 * grid anchor) continues ids[0, n) furthest, when that line is more than a
 * grid chunk above `ram` (what RAM offers) and reading it costs less than
 * the prefill it saves. Its index (-1: none), the line in *start and the
 * entry's taint in *taint. Nothing is read. */
static int spill_offer(cache *c, const int32_t *ids, uint64_t n, uint64_t ram,
		       uint64_t *start, uint64_t *taint)
{
	int best = -1;
	uint64_t bs = 0;
	for (uint32_t i = 0; i < c->spill.n_ent; i++) {
		const cache_spill_ent *e = &c->spill.ent[i];
		uint64_t cp = cache_common_prefix(ids, n, e->ids, e->valid);
		uint64_t lim = cache_min64(cp, n - 1), s = 0;
		if (e->end_len && e->end_len <= lim)
			s = e->end_len;
		else
			for (uint32_t j = e->n_anc; j-- > 0;)
				if (e->anc[j] <= lim) {
					s = e->anc[j];
					break;
				}
		if (s > bs) {
			bs = s;
			best = (int)i;
		}
	}
	if (best < 0 || bs <= ram + c->lay->grid)
		return -1;
	/* the read: every row up to the line and the state, at the rate the
	 * last restore measured (2 GB/s before one) */
	double bytes =
	    (double)bs * (double)c->row_bytes + 2.0 * (double)c->sec_bytes;
	double read_s = bytes / spill_read_bps(c);
	if (read_s >= (double)(bs - ram) / cache_prefill_rate(c))
		return -1;
	*start = bs;
	*taint = c->spill.ent[best].taint;
	return best;
}

/* A prompt of at least spill_min_tokens that no entry serves while one
 * shares at least 4 grid chunks with it, more than RAM serves (ram): one
 * line, "[spill] no entry served: eid= owner= tokens= shares= offer= ram=
 * why=" (end_no_align: its end not reached; anchors_below: its anchors at
 * or below ram; short: under a chunk above ram; slow: the read costs more
 * than the prefill), counted as refused. */
static void spill_refused(cache *c, const int32_t *ids, uint64_t n,
			  uint64_t ram)
{
	if (!c->spill.on || n < c->cfg.spill_min_tokens)
		return;
	uint64_t g = c->lay->grid, bc = 0;
	int best = -1;
	for (uint32_t i = 0; i < c->spill.n_ent; i++) {
		uint64_t cp = cache_common_prefix(ids, n, c->spill.ent[i].ids,
						  c->spill.ent[i].valid);
		if (cp > bc) {
			bc = cp;
			best = (int)i;
		}
	}
	if (best < 0 || bc < 4 * g || bc <= ram)
		return;
	const cache_spill_ent *e = &c->spill.ent[best];
	uint64_t lim = cache_min64(bc, n - 1), s = 0;
	if (e->end_len && e->end_len <= lim)
		s = e->end_len;
	else
		for (uint32_t j = e->n_anc; j-- > 0;)
			if (e->anc[j] <= lim) {
				s = e->anc[j];
				break;
			}
	const char *why = e->end_len && e->end_len > lim && s <= ram
			      ? "end_no_align"
			  : s <= ram	 ? "anchors_below"
			  : s <= ram + g ? "short"
					 : "slow";
	c->spill.k.refused++;
	moor_info("[spill] no entry served: eid=%s owner=%s tokens=%llu "
		  "shares=%llu offer=%llu ram=%llu why=%s",
		  e->name, e->owner[0] ? e->owner : "-", (unsigned long long)n,
		  (unsigned long long)bc, (unsigned long long)s,
		  (unsigned long long)ram, why);
}

const char *cache_spill_ent_name(cache *c, int i)
{
	return c->spill.ent[i].name;
}

/* Restores entry `name` (an offer's) up to line s into the live buffers: the
 * rows [k, s), the state at s, the saved anchors in (k, s] as resident anchors.
 * Every id is compared with ids[0, s) and every block and anchor checked first
 * (a failure costs the entry: deleted, MOOR_EFORMAT). */
static int spill_restore(cache *c, const char *name_in, const int32_t *ids,
			 uint64_t k, uint64_t s, uint64_t limit)
{
	uint32_t ns = c->lay->n_sections, nv = c->lay->n_views;
	char name[17], why[MOOR_ERRLEN] = "";
	snprintf(name, sizeof name, "%s", name_in);
	double t0 = now_ms();
	int efd = open_dir_at(c->spill.dfd, name, 0);
	if (efd < 0) {
		index_drop(c, name);
		return MOOR_EFORMAT;
	}
	man_view mv = {0};
	int rc = man_load(c, efd, &mv, why);
	if (!rc && (mv.m->valid < s || memcmp(mv.ids, ids, s * 4))) {
		moor_errf(why, "its ids are not the prompt's");
		rc = MOOR_EFORMAT;
	}
	uint64_t bbytes = SPILL_BLK * c->row_bytes;
	uint64_t big = bbytes > c->sec_bytes ? bbytes : c->sec_bytes;
	uint64_t soff = UINT64_MAX;
	void *stage = rc ? NULL : stage_new(c, big, &soff);
	uint64_t *got =
	    rc ? NULL : malloc((2ull * (ns > nv ? ns : nv) + 2) * 8);
	if (!rc && (!stage || !got))
		rc = -ENOMEM;
	uint64_t read0 = c->spill.k.bytes_read;
	double t_log = t0; /* a long restore logs its progress once a second */
	/* the files (the sections' first, as load_entry's): the saved
	 * anchors in (k, s], the end when s is its line, the blocks of the
	 * rows [k, s) */
	spill_rd r;
	memset(&r, 0, sizeof r);
	if (!rc)
		rc = rd_open(&r, c, efd,
			     (uint32_t)(mv.m->n_blk + mv.m->n_anc + 1));
	for (uint64_t i = 0; !rc && i < mv.m->n_anc; i++) {
		const uint64_t *e = mv.anc + i * (1 + 2ull * ns);
		if (e[0] > k && e[0] <= s)
			rd_add_anc(&r, &mv, i);
	}
	if (!rc && s == mv.m->end_len)
		rd_add(&r, "end", SF_END, mv.m->end_len, 0, 2ull * ns, mv.end,
		       c->sec_bytes);
	for (uint64_t j = 0; !rc && j < mv.m->n_blk; j++) {
		uint64_t a = j * SPILL_BLK,
			 rows = cache_min64(SPILL_BLK, mv.m->valid - a);
		if (a < s && a + rows > k) /* not past the line, nor in place */
			rd_add_blk(&r, &mv, j);
	}
	if (!rc)
		rc = rd_start(&r);
	for (uint32_t fi = 0; !rc && fi < r.n; fi++) {
		const rd_file *f = &r.f[fi];
		rc = rd_file_in(&r, fi, stage, got, why);
		double t = now_ms();
		uint64_t a = f->index * SPILL_BLK, lo = 0, hi = 0;
		if (!rc && f->kind == SF_BLOCK) {
			lo = cache_max64(k, a);
			hi = cache_min64(s, a + f->rows);
			rc = hc_rows(&r.hc, 0, stage, f->rows, lo - a, lo,
				     hi - lo);
		} else if (!rc && f->kind == SF_ANCHOR) {
			(void)hc_adopt(&r.hc, f->index, stage, limit);
			if (f->index == s)
				rc = hc_secs_in(&r.hc, stage);
		} else if (!rc) {
			rc = hc_secs_in(&r.hc, stage);
		}
		if (!rc) /* the copies out of stage are done before its reuse */
			rc = cache_sync(c);
		r.copy_ms += now_ms() - t;
		t = now_ms();
		if (!rc && t - t_log >= 1000 && hi < s && hi > k) {
			t_log = t;
			double rate = (double)(hi - k) / ((t - t0) / 1e3);
			moor_info(
			    "[spill] restoring %s: %llu of %llu rows, %.0f "
			    "rows/s, ETA %.1f s",
			    name, (unsigned long long)(hi - k),
			    (unsigned long long)(s - k), rate,
			    rate > 0 ? (double)(s - hi) / rate : 0.0);
		}
	}
	if (!rc && s != mv.m->end_len && cache_anchor_find(c, s) < 0) {
		moor_errf(why, "no state at %llu", (unsigned long long)s);
		rc = MOOR_EFORMAT;
	}
	rd_close(&r);
	/* the entry's marks on the rows it gave back (the rows below k are
	 * clean: no mark) */
	for (uint64_t i = 0; !rc && i < mv.m->n_mk; i++)
		if (mv.mk[i].start >= k && mv.mk[i].start + mv.mk[i].len <= s)
			(void)cache_marks_add(c, mv.mk[i].start, mv.mk[i].len,
					      mv.mk[i].kind);
	/* every copy out of stage done before it goes (the failure paths'
	 * too) */
	int sr = cache_sync(c);
	if (!rc)
		rc = sr;
	stage_free(c, stage, soff);
	free(got);
	free(mv.buf);
	close(efd);
	if (rc) {
		moor_warn("[spill] the restore of %s failed: %s", name,
			  why[0] ? why : moor_strerror(rc));
		entry_delete(c, name, "its restore failed");
		c->spill.k.hit_failed++;
		return MOOR_EFORMAT;
	}
	double ms = now_ms() - t0;
	uint64_t rd = c->spill.k.bytes_read - read0;
	if (ms > 0 && rd > (1u << 20))
		c->spill.read_bps = (double)rd / (ms / 1e3);
	int mfd = openat(c->spill.dfd, name, O_RDONLY | O_DIRECTORY);
	if (mfd >= 0) {
		(void)utimensat(mfd, "manifest", NULL, 0);
		close(mfd);
	}
	c->spill.k.hits++;
	char said[MOOR_ERRLEN];
	rd_said(&r, said, sizeof said);
	moor_info("[spill] restored %s at %llu (rows [%llu, %llu) read, %llu "
		  "bytes) in %.1f ms (%s)",
		  name, (unsigned long long)s, (unsigned long long)k,
		  (unsigned long long)s, (unsigned long long)rd, ms, said);
	return 0;
}

int cache_spill_evict(cache *c, uint64_t base)
{
	if (!c->spill.on || c->valid < c->cfg.spill_min_tokens)
		return 0;
	uint32_t idx[CACHE_SPAN_MAX_ANCHORS], m;
	int whole;
	(void)cache_park_choose(c, base, idx, &m, &whole);
	if (whole && c->cfg.park_bytes)
		return 0; /* the park holds it to its end */
	/* the write guard: over the day's budget only long conversations,
	 * past 1.5 times it none (the park takes what it can, as without
	 * the spill) */
	if (!cache_ledger_allow(c, CACHE_LEDGER_SPILL_EVICT, c->valid)) {
		c->spill.k.guard_skips++;
		return 0;
	}
	char name[17], err[MOOR_ERRLEN] = "";
	if (save_resident(c, name, err)) {
		moor_warn("[spill] eviction: %s", err);
		return 0;
	}
	c->spill.k.evict_saves++;
	return 1;
}

/* ---- the session spill as a tier ---- */

static int spill_tier_offer(cache *c, cache_tier_ask *q, cache_tier_offer *o)
{
	uint64_t s, t;
	int e =
	    q->guest ? -1 : spill_offer(c, q->r->ids, q->r->n, q->best, &s, &t);
	if (e < 0)
		return 0;
	memset(o, 0, sizeof *o);
	o->start = s;
	/* rows in place below k are clean and the entry's: its blocks from
	 * k on are read */
	o->k = o->cut = cache_min64(cache_min64(q->c_res, q->t_res), s);
	o->taint = t < s ? t : CACHE_NO_TAINT;
	snprintf(o->name, sizeof o->name, "%s", cache_spill_ent_name(c, e));
	return 1;
}

static int spill_tier_restore(cache *c, const cache_tier_offer *o,
			      const int32_t *ids, uint64_t limit)
{
	return spill_restore(c, o->name, ids, o->k, o->start, limit);
}

static uint64_t spill_bytes(cache *c)
{
	uint64_t n, b;
	spill_stats(c, &n, &b);
	return b;
}

/* With a cfg.spill_dir whose sessions directory opened. */
static int spill_on(const cache *c)
{
	return c->spill.on;
}

static json_t *spill_json(cache *c)
{
	json_t *o = json_object();
	uint64_t ne, nb;
	spill_stats(c, &ne, &nb);
	json_object_set_new(o, "on", json_boolean(spill_on(c)));
	CACHE_SETI(o, "entries", ne);
	CACHE_SETI(o, "bytes", nb);
	CACHE_SETI(o, "budget", c->cfg.spill_bytes);
	CACHE_SETI(o, "saves", c->spill.k.saves);
	CACHE_SETI(o, "save_failed", c->spill.k.save_failed);
	CACHE_SETI(o, "restores", c->spill.k.restores);
	CACHE_SETI(o, "restore_failed", c->spill.k.restore_failed);
	CACHE_SETI(o, "blocks_written", c->spill.k.blocks_written);
	CACHE_SETI(o, "blocks_kept", c->spill.k.blocks_kept);
	CACHE_SETI(o, "anchors_written", c->spill.k.anchors_written);
	CACHE_SETI(o, "anchors_kept", c->spill.k.anchors_kept);
	/* kept, checked where they are: not a byte copied off the device */
	CACHE_SETI(o, "blocks_unread", c->spill.k.blocks_unread);
	CACHE_SETI(o, "anchors_unread", c->spill.k.anchors_unread);
	CACHE_SETI(o, "bytes_written", c->spill.k.bytes_written);
	CACHE_SETI(o, "bytes_read", c->spill.k.bytes_read);
	json_object_set_new(o, "codec", json_boolean(c->cfg.spill_codec));
	CACHE_SETI(o, "codec_raw", c->spill.k.codec_raw);
	CACHE_SETI(o, "codec_out", c->spill.k.codec_out);
	CACHE_SETI(o, "swept", c->spill.k.swept);
	CACHE_SETI(o, "expired", c->spill.k.expired);
	CACHE_SETI(o, "evicted", c->spill.k.evicted);
	CACHE_SETI(o, "evict_saves", c->spill.k.evict_saves);
	CACHE_SETI(o, "hits", c->spill.k.hits);
	CACHE_SETI(o, "hit_failed", c->spill.k.hit_failed);
	CACHE_SETI(o, "refused", c->spill.k.refused);
	CACHE_SETI(o, "guard_skips", c->spill.k.guard_skips);
	/* saves not tried: too little room to rewrite the entry */
	CACHE_SETI(o, "save_skipped_room", c->spill.k.save_skipped_room);
	/* the tier's free-space floor: saves (or a file of one) not made
	 * under it, and entries removed to keep it */
	CACHE_SETI(o, "min_free", c->cfg.disk_min_free);
	CACHE_SETI(o, "floor_binds", c->spill.k.floor_binds);
	CACHE_SETI(o, "floor_evicted", c->spill.k.floor_evicted);
	json_object_set_new(o, "last_save_ms",
			    json_real(c->spill.last_save_ms));
	json_object_set_new(o, "last_restore_ms",
			    json_real(c->spill.last_restore_ms));
	return o;
}

/* Its own budget on the drive (spill_bytes, LRU; spill_hours): nothing
 * for the memory policy to take. */
const cache_tier_ops cache_tier_spill = {
    .tier = CACHE_TIER_SPILL,
    .level = -1,
    .flags = CACHE_TF_NVME | CACHE_TF_MARKS,
    .offer = spill_tier_offer,
    .restore = spill_tier_restore,
    .restore_bytes = cache_tier_rows_bytes,
    .read_bps = spill_read_bps,
    .refused = spill_refused,
    .bytes = spill_bytes,
    .clear = spill_clear,
    .stats = spill_json,
    .on = spill_on,
};
