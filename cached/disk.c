/* disk.c: the disk tier: a cold grid prefill's rows and states on the
 * NVMe, keyed by the prefix chain, so a shared head (an agent's system
 * prompt and tools) outlives a restart, a deploy and a day of other
 * sessions.
 *
 * Files, under DIR/disk/ (g: the layout's grid):
 *   c-<key>-<b>  a chunk: rows [b - g, b) of every view (a compact rows
 *                buffer of window g) and those g token ids; key is the
 *                prefix chain's hash at b (c->ph[b], whose root the
 *                request's salt seeds), so two prompts that share 30 grid
 *                chunks share 30 files;
 *   a-<key>-<L>  an anchor: the sections at line L, in the layout's order,
 *                and the keys of the L / g chunks below it. An anchor is
 *                usable when every chunk it reads is on the disk.
 * Every file: a header of as many 4 KiB lines as it needs (magic,
 * version, kind, line, key, the layout's digest, the fingerprint, sizes,
 * an xxh3 per section or per ids and rows, the chunk keys, an xxh3 of the
 * header), then the payload padded to 4 KiB (O_DIRECT).
 *
 * The index (LMDB, DIR/disk/index): `idx` one record a file (its kind,
 * line, key, bytes, hits, last use, the fingerprint; an anchor's chunk
 * keys), `cnt` the cold-line counts by (key, line), `sess` the sessions
 * seen. The counts are traffic, not rows: a fingerprint change sweeps the
 * files and keeps them. The bytes written a day are the ledger's
 * (ledger.c), and so is the write guard: past the day's budget cache_disk_plan
 * plans nothing. A file is the attached engine's when its fingerprint is,
 * or one an adoption record declared equal (cache_ledger_fp_ok).
 *
 * What is written is decided before the prefill runs (cache_disk_plan): every
 * grid line the prefill forwards is counted; the longest clean line counted
 * admit_after times (2) gets an anchor, and so do the branch lines (counted
 * admit_after times, where the count falls at the next line: an earlier
 * prompt read this far and went on differently; the 4 longest), and the
 * last head_anchors (4) lines at or below where the last user message
 * starts (cache_req.user_at; unknown: the prompt's last lines) of a
 * session's first request of at least min_tokens (4,096). Nothing is
 * written above the plan's taint line (rows a decode wrote, a snapshot's
 * state), nothing for a guest or a prompt under min_tokens. The chosen lines
 * get anchor slots like the resident anchors; the engine fills them as the
 * prefill passes them.
 *
 * The writes never hold a request. At the commit the slots' sections are
 * copied to staging buffers (the job; buffers the writer gave back are
 * kept, up to head_anchors, so the copy lands in touched pages) and the
 * slots go back; a writer thread then sums and seals each anchor's copy,
 * copies each missing chunk's rows out of the live buffers and writes the
 * chunks and the anchor, while cached serves. The next plan
 * fences the job (cache_disk_fence): rows at or above the lowest row that plan
 * may write are no longer copied (a chunk being copied is waited for),
 * and an anchor whose chunks cannot all be written is dropped (`window`).
 * A plan that resumes above the job's rows leaves it running.
 *
 * Each file is written to NAME.tmp (O_DIRECT, or buffered with fadvise
 * DONTNEED where the file system refuses it), fdatasynced, renamed, the
 * directory fsynced, then indexed. At the open every .tmp goes, every
 * record whose file is gone, and every file the index does not name (a
 * crash between the rename and the index, a record a damaged page lost)
 * is indexed again from its header when that reads back whole, else
 * deleted; at an engine's attach every file of another fingerprint or
 * layout goes.
 *
 * Room (the writer, before each anchor's files): the tier stays under its
 * budget (16 GB) and leaves the file system at least min_free (50 GB) free;
 * the least valuable anchor goes first: (hits + 1) * tokens it saves / the
 * bytes it holds alone (its file and its share of each chunk it reads),
 * halved per idle day; chunks no anchor reads go with it. An anchor unused
 * for ttl_days (7) goes. When nothing more can go and the floor still
 * binds, the anchor is not written and the floor is reported.
 *
 * The lookup (disk_offer) comes after the RAM tiers and the spill: the
 * longest anchor line below n whose anchor and chunks are indexed, above
 * what they offer, whose read (at the tier's measured read rate) costs less
 * than the prefill it saves (at the engine's prefill rate, cache_prefill_rate:
 * the fastest measured from a plan to its commit, else --prefill-tps). The
 * restore (disk_restore) reads only the chunks above the clean rows in
 * place, in pieces of 8 MiB by four reader threads (the drive kept busy
 * across files), up to two files ahead of the checks and copies (three
 * staging buffers), the anchor first so that its checks and copies (the
 * live sections, the resident anchor) run while the chunks are read; on a
 * host-mapped arena toucher threads fault the sections' and rows' pages
 * in ahead of the copies and an adopter thread copies the resident
 * anchor (a fresh page's first write is dearer than its read on a VM).
 * Every chunk's header, xxh3s and stored ids are compared with the prompt
 * before its rows are copied, the anchor's sections and chunk keys before
 * the state is; a file that fails is deleted with its record, and the plan
 * prefills cold (the planner cuts the resident prompt to 0, its anchors
 * with it, and zeroes the sections: the rows and state it copied are
 * rewritten by that prefill before anything reads them).
 *
 * Concurrency: the writer thread owns the write path; the daemon's thread
 * plans, restores and reads the index. `mu` guards the queue, the fence,
 * the counters and `reading` (a restore in progress: the writer evicts
 * nothing meanwhile). LMDB serializes the two threads' write
 * transactions. The writer copies rows out of the live buffers by a mover
 * of its own (on a CUDA device arena a twin of the cache's: its own
 * stream, synced before the fence may let a plan write those rows); the
 * commit copies the anchors' sections by the cache's mover and syncs
 * before the slots go back; a restore copies by the cache's mover, synced
 * before the plan's answer (cache_sync), as every restore is, and after
 * each file before its staging buffer is read into again. On CUDA the
 * restore stages in blocks of the host arena (registered by the mover:
 * DMA at the link's rate, where a pageable buffer copies at the driver's
 * pageable rate, about 6 GB/s on the lent H200), private memory when the
 * host arena has no room (test_disk_resume takes the host arena's path on
 * the CPU through its deferring mover).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <lmdb.h>
#include <math.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "cache_int.h"
#include "dfile.h"
#include "kvdb.h"
#include "moor.h"

#define DK_MAGIC 0x314b5344524f4f4dull /* "MOORDSK1" */
#define DK_VERSION 1u
#define DK_LINE 4096u	/* O_DIRECT's alignment and a header line */
#define DK_JOB_MAX 16u	/* anchors a commit stages */
#define DK_QUEUE_MAX 2u /* jobs waiting (more: dropped as busy) */
#define DK_SPARE_MAX 8u /* staging slots kept */
#define DK_BRANCH_MAX 4u
#define DK_RBUF 3u	      /* the restore's staging buffers */
#define DK_READERS 4u	      /* its reader threads: reads in flight */
#define DK_PIECE (8ull << 20) /* bytes a read of the restore */
_Static_assert(DK_RBUF >= 2, "a file is read while the last is applied");
_Static_assert(DK_PIECE % DK_LINE == 0, "pieces are O_DIRECT aligned");

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
	       "the tier's files are little-endian, written as the host's");

enum { DK_CHUNK = 1, DK_ANCHOR = 2 };

typedef struct dk_hdr {
	uint64_t magic;
	uint32_t version, kind;
	uint64_t line;	 /* chunk: its top b; anchor: its line */
	uint64_t key;	 /* the prefix chain's hash at line */
	uint64_t digest; /* the layout's (cache_tier_layout_digest) */
	uint64_t grid;
	uint64_t hdr_bytes;  /* the header's 4 KiB lines */
	uint64_t data_bytes; /* the payload (before its padding) */
	uint64_t n_sums;     /* chunk: 2 (ids, rows); anchor: n_sections */
	uint64_t n_keys;     /* anchor: the chunk keys (line / grid) */
	uint64_t made;	     /* unix seconds */
	uint64_t hdr_sum;    /* xxh3 of [0, hdr_bytes) with this field 0 */
	uint8_t fp[32];
} dk_hdr;
_Static_assert(sizeof(dk_hdr) == 128, "dk_hdr is 128 bytes");

/* An index record (LMDB idx, keyed by the file's name); an anchor's chunk
 * keys follow it. */
typedef struct dk_rec {
	uint32_t kind, n_keys;
	uint64_t line, key, bytes, hits, used, made, digest;
	uint8_t fp[32];
} dk_rec;
_Static_assert(sizeof(dk_rec) == 96, "dk_rec is 96 bytes");

typedef struct dk_ajob {
	uint64_t line;
	uint8_t *file; /* the anchor file as written (aligned) */
	uint64_t bytes;
} dk_ajob;

typedef struct dk_job {
	struct dk_job *next;
	int32_t *ids;  /* [top] */
	uint64_t *lph; /* [top / g + 1]: the chain's hash at each line */
	uint64_t top;
	uint64_t fence; /* rows at or above it are not copied */
	uint32_t n_anc;
	dk_ajob anc[DK_JOB_MAX];
} dk_job;

struct cache_disk_tier {
	int dfd;
	MDB_env *env;
	MDB_dbi idx, cnt, sess;
	pthread_t th;
	int th_on, stop;
	pthread_mutex_t mu;
	pthread_cond_t work, done;
	dk_job *q;	  /* the running job first */
	int running;	  /* q's head is being written */
	uint64_t copying; /* top row of the chunk being copied; 0: none */
	int reading;	  /* a restore reads files */
	int spilling;	  /* a spill save runs: the writer waits */
	uint8_t *wbuf;	  /* the writer's chunk file (aligned) */
	/* the restore's private staging (restore_files): DK_RBUF buffers
	 * back to back, the first of rbuf0_bytes (an anchor file or a chunk
	 * file), the others of chunk_file; mapped and populated at the
	 * attach on a host-mapped arena, on the first restore that finds no
	 * room in the host arena on a CUDA one */
	uint8_t *rmap;
	uint64_t rmap_bytes, rbuf0_bytes;
	/* staging slots the writer gave back (anchor_file bytes each, the
	 * attached layout's), at most cfg.disk_head_anchors (1 to 8) kept:
	 * a commit copies an anchor into pages already touched, where fresh
	 * ones fault and zero on the commit's path (guarded by mu) */
	uint8_t *spare[DK_SPARE_MAX];
	uint32_t n_spare, keep_spare;
	/* the writer's copies out of the live rows: the cache's own mover on
	 * host memory (memcpy), on a CUDA device arena a twin of the cache's
	 * (a stream of its own, so the writer and the daemon's thread each
	 * sync only their own copies) */
	const arena_mover *mv;
	arena_mover *mv_own;

	/* the attached layout, as the writer reads it */
	int attached;
	uint64_t grid, window, row_bytes, sec_bytes;
	uint32_t n_views, n_sec;
	cache_vgeom *vg;
	const char **view;
	uint64_t *secb;
	uint64_t digest;
	uint8_t fp[32];
	uint64_t chunk_file, anchor_file, chunk_hdr, anchor_hdr;

	/* the plan in flight */
	uint64_t *lph; /* [window / g + 1] */
	uint64_t plan_n;
	double read_bps;

	time_t floor_said, index_said;
	struct {
		uint64_t hits, hit_failed, tokens_read, bytes_read,
		    bytes_written, chunks_written, anchors_written,
		    write_failed, window, busy, evicted, expired, swept,
		    orphans, floor_binds, admitted, counted, skipped_have,
		    rebuilt, index_failed, reindexed, chunks_kept, direct,
		    buffered, guard_skips;
	} k;
	double last_restore_ms, last_write_ms;
	/* the last restore's time, by where it went: the reads' span (the
	 * first piece's start to the last one's end), the daemon's thread
	 * waiting for a file, checking, copying (the mover's sync included),
	 * waiting for the resident anchor's copy at the end; its staging in
	 * the host arena (registered on CUDA) or private */
	struct {
		double read_ms, wait_ms, check_ms, copy_ms, adopt_ms;
		int host;
	} last;
};

time_t (*cache_disk_clock)(void);

/* The tier's clock: the files' last use, the idle days of the value, the
 * TTL (a test moves it through cache_disk_clock). */
static uint64_t now_s(void)
{
	return (uint64_t)(cache_disk_clock ? cache_disk_clock() : time(NULL));
}

static uint64_t up4k(uint64_t x)
{
	return (x + DK_LINE - 1) / DK_LINE * DK_LINE;
}

static void name_of(char *b, size_t n, int kind, uint64_t key, uint64_t line)
{
	snprintf(b, n, "%c-%016llx-%llu", kind == DK_CHUNK ? 'c' : 'a',
		 (unsigned long long)key, (unsigned long long)line);
}

static int lmdb_rc(int rc)
{
	if (rc == 0)
		return 0;
	if (rc > 0)
		return -rc; /* errno */
	return rc == MDB_MAP_FULL ? MOOR_ENOSPACE : MOOR_EFORMAT;
}

/* ---- files: O_DIRECT where the file system takes it ---- */

static int open_direct(int dfd, const char *name, int flags, int *direct)
{
	int fd = openat(dfd, name, flags | O_DIRECT | O_CLOEXEC, 0600);
	*direct = fd >= 0;
	if (fd < 0 && errno == EINVAL)
		fd = openat(dfd, name, flags | O_CLOEXEC, 0600);
	return fd < 0 ? -errno : fd;
}

static int fault(int op, const char *name)
{
	return dfile_fault ? dfile_fault(op, name) : 0;
}

/* Writes buf[0, n) (aligned, n a multiple of 4 KiB) as dfd/name
 * crash-safely. */
static int file_write(int dfd, const char *name, const void *buf, uint64_t n,
		      int *was_direct)
{
	char tmp[96];
	snprintf(tmp, sizeof tmp, "%s.tmp", name);
	int direct,
	    fd = open_direct(dfd, tmp, O_WRONLY | O_CREAT | O_TRUNC, &direct);
	if (fd < 0)
		return fd;
	*was_direct = direct;
	int rc = fault(DFILE_OP_WRITE, name);
	const char *b = buf;
	uint64_t left = n;
	if (rc == DFILE_SHORT) {
		/* half of it lands, then the device refuses */
		(void)!pwrite(fd, b, (size_t)(n / 2 / DK_LINE * DK_LINE), 0);
		rc = -EIO;
	}
	while (!rc && left) {
		ssize_t w = pwrite(fd, b, left > (1u << 30) ? (1u << 30) : left,
				   (off_t)(n - left));
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			rc = w < 0 ? -errno : -EIO;
			break;
		}
		b += w;
		left -= (uint64_t)w;
	}
	if (!rc)
		rc = fault(DFILE_OP_FSYNC, name);
	if (!rc && fdatasync(fd) < 0)
		rc = -errno;
	if (!rc && !direct)
		(void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	if (close(fd) < 0 && !rc)
		rc = -errno;
	if (!rc)
		rc = fault(DFILE_OP_RENAME, name);
	if (!rc && renameat(dfd, tmp, dfd, name) < 0)
		rc = -errno;
	if (rc) {
		unlinkat(dfd, tmp, 0);
		return rc;
	}
	rc = fault(DFILE_OP_FSYNC, ".");
	if (!rc && fsync(dfd) < 0)
		rc = -errno;
	return rc;
}

/* ---- headers ---- */

static uint64_t hdr_bytes(uint64_t n_sums, uint64_t n_keys)
{
	return up4k(sizeof(dk_hdr) + 8 * (n_sums + n_keys));
}

static void hdr_seal(dk_hdr *h)
{
	h->hdr_sum = 0;
	h->hdr_sum = XXH3_64bits(h, h->hdr_bytes);
}

static void hdr_init(struct cache_disk_tier *d, dk_hdr *h, uint32_t kind,
		     uint64_t line, uint64_t key, uint64_t data,
		     uint64_t n_sums, uint64_t n_keys)
{
	memset(h, 0, sizeof *h);
	h->magic = DK_MAGIC;
	h->version = DK_VERSION;
	h->kind = kind;
	h->line = line;
	h->key = key;
	h->digest = d->digest;
	h->grid = d->grid;
	h->hdr_bytes = hdr_bytes(n_sums, n_keys);
	h->data_bytes = data;
	h->n_sums = n_sums;
	h->n_keys = n_keys;
	h->made = now_s();
	memcpy(h->fp, d->fp, 32);
}

/* The header of a file read back says what the index and the prompt say. */
static int hdr_check(cache *c, dk_hdr *h, uint32_t kind, uint64_t line,
		     uint64_t key, uint64_t n_sums, uint64_t n_keys)
{
	struct cache_disk_tier *d = c->disk;
	if (h->magic != DK_MAGIC || h->version != DK_VERSION ||
	    h->kind != kind || h->line != line || h->key != key ||
	    h->digest != d->digest || h->grid != d->grid ||
	    h->n_sums != n_sums || h->n_keys != n_keys ||
	    h->hdr_bytes != hdr_bytes(n_sums, n_keys) ||
	    !cache_ledger_fp_ok(c, h->fp))
		return MOOR_EFORMAT;
	uint64_t want = h->hdr_sum;
	h->hdr_sum = 0;
	uint64_t got = XXH3_64bits(h, h->hdr_bytes);
	h->hdr_sum = want;
	return got == want ? 0 : MOOR_EFORMAT;
}

/* ---- the index ---- */

static int idx_get(struct cache_disk_tier *d, MDB_txn *tx, const char *name,
		   dk_rec *r, const uint64_t **keys)
{
	MDB_val k = {strlen(name), (void *)name}, v;
	int rc = mdb_get(tx, d->idx, &k, &v);
	if (rc)
		return rc == MDB_NOTFOUND ? -ENOENT : lmdb_rc(rc);
	if (v.mv_size < sizeof *r)
		return MOOR_EFORMAT;
	memcpy(r, v.mv_data, sizeof *r);
	if (v.mv_size != sizeof *r + 8ull * r->n_keys)
		return MOOR_EFORMAT;
	if (keys)
		*keys = (const uint64_t *)((const char *)v.mv_data + sizeof *r);
	return 0;
}

static int idx_put(struct cache_disk_tier *d, const char *name, const dk_rec *r,
		   const uint64_t *keys)
{
	MDB_txn *tx;
	int rc = mdb_txn_begin(d->env, NULL, 0, &tx);
	if (rc)
		return lmdb_rc(rc);
	MDB_val k = {strlen(name), (void *)name},
		v = {sizeof *r + 8ull * r->n_keys, NULL};
	rc = mdb_put(tx, d->idx, &k, &v, MDB_RESERVE);
	if (!rc) {
		memcpy(v.mv_data, r, sizeof *r);
		if (r->n_keys)
			memcpy((char *)v.mv_data + sizeof *r, keys,
			       8ull * r->n_keys);
		rc = mdb_txn_commit(tx);
	} else {
		mdb_txn_abort(tx);
	}
	return lmdb_rc(rc);
}

/* Deletes the file and its record. */
static void file_drop(struct cache_disk_tier *d, MDB_txn *tx, const char *name)
{
	unlinkat(d->dfd, name, 0);
	MDB_val k = {strlen(name), (void *)name};
	(void)mdb_del(tx, d->idx, &k, NULL);
}

static void file_drop1(struct cache_disk_tier *d, const char *name)
{
	MDB_txn *tx;
	unlinkat(d->dfd, name, 0);
	if (mdb_txn_begin(d->env, NULL, 0, &tx))
		return;
	MDB_val k = {strlen(name), (void *)name};
	(void)mdb_del(tx, d->idx, &k, NULL);
	(void)mdb_txn_commit(tx);
}

/* ---- room: eviction by value ---- */

typedef struct dk_item {
	char name[48];
	dk_rec r;
	uint64_t *keys; /* anchor: its chunk keys (malloc'd) */
	uint32_t refs;	/* chunk: anchors that read it */
	int prot;	/* the job's: not evicted */
} dk_item;

static int item_find(dk_item *it, uint32_t n, uint32_t kind, uint64_t key,
		     uint64_t line)
{
	for (uint32_t i = 0; i < n; i++)
		if (it[i].r.kind == kind && it[i].r.key == key &&
		    it[i].r.line == line)
			return (int)i;
	return -1;
}

static void items_free(dk_item *it, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		free(it[i].keys);
	free(it);
}

/* Every record (a read transaction; the caller frees). */
static int items_load(struct cache_disk_tier *d, dk_item **out, uint32_t *n_out,
		      uint64_t *total)
{
	*out = NULL;
	*n_out = 0;
	*total = 0;
	MDB_txn *tx;
	MDB_cursor *cu;
	int rc = mdb_txn_begin(d->env, NULL, MDB_RDONLY, &tx);
	if (rc)
		return lmdb_rc(rc);
	rc = mdb_cursor_open(tx, d->idx, &cu);
	if (rc) {
		mdb_txn_abort(tx);
		return lmdb_rc(rc);
	}
	dk_item *it = NULL;
	uint32_t n = 0, cap = 0;
	MDB_val k, v;
	int op = MDB_FIRST;
	while (!mdb_cursor_get(cu, &k, &v, op)) {
		op = MDB_NEXT;
		if (v.mv_size < sizeof(dk_rec) || k.mv_size >= 48)
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 64;
			dk_item *ni = realloc(it, cap * sizeof *it);
			if (!ni) {
				rc = -ENOMEM;
				break;
			}
			it = ni;
		}
		dk_item *x = &it[n];
		memset(x, 0, sizeof *x);
		memcpy(x->name, k.mv_data, k.mv_size);
		memcpy(&x->r, v.mv_data, sizeof x->r);
		if (v.mv_size != sizeof x->r + 8ull * x->r.n_keys)
			continue;
		if (x->r.n_keys) {
			x->keys = malloc(8ull * x->r.n_keys);
			if (!x->keys) {
				rc = -ENOMEM;
				break;
			}
			memcpy(x->keys, (char *)v.mv_data + sizeof x->r,
			       8ull * x->r.n_keys);
		}
		*total += x->r.bytes;
		n++;
	}
	mdb_cursor_close(cu);
	mdb_txn_abort(tx);
	if (rc) {
		items_free(it, n);
		return rc;
	}
	for (uint32_t i = 0; i < n; i++)
		for (uint32_t j = 0;
		     it[i].r.kind == DK_ANCHOR && j < it[i].r.n_keys; j++) {
			int c = item_find(it, n, DK_CHUNK, it[i].keys[j],
					  (j + 1) * d->grid);
			if (c >= 0)
				it[c].refs++;
		}
	*out = it;
	*n_out = n;
	return 0;
}

static double item_value(struct cache_disk_tier *d, dk_item *it, uint32_t n,
			 uint32_t i, uint64_t now)
{
	double alone = (double)it[i].r.bytes;
	for (uint32_t j = 0; j < it[i].r.n_keys; j++) {
		int c = item_find(it, n, DK_CHUNK, it[i].keys[j],
				  (j + 1) * d->grid);
		if (c >= 0 && it[c].refs)
			alone += (double)it[c].r.bytes / it[c].refs;
	}
	double idle =
	    now > it[i].r.used ? (double)(now - it[i].r.used) / 86400 : 0;
	return (double)(it[i].r.hits + 1) * (double)it[i].r.line / alone *
	       pow(0.5, floor(idle));
}

static uint64_t free_bytes(struct cache_disk_tier *d)
{
	struct statvfs sv;
	if (fstatvfs(d->dfd, &sv) < 0)
		return UINT64_MAX;
	return (uint64_t)sv.f_bavail * sv.f_frsize;
}

/* Deletes anchor i and the chunks only it read (not the protected ones),
 * or, with i < 0, every chunk no anchor reads. Returns the bytes freed. */
static uint64_t evict(struct cache_disk_tier *d, dk_item *it, uint32_t n, int i)
{
	MDB_txn *tx;
	if (mdb_txn_begin(d->env, NULL, 0, &tx))
		return 0;
	uint64_t freed = 0;
	if (i >= 0) {
		file_drop(d, tx, it[i].name);
		freed += it[i].r.bytes;
		for (uint32_t j = 0; j < it[i].r.n_keys; j++) {
			int c = item_find(it, n, DK_CHUNK, it[i].keys[j],
					  (j + 1) * d->grid);
			if (c >= 0 && it[c].refs)
				it[c].refs--;
		}
		it[i].r.kind = 0; /* gone */
	}
	for (uint32_t c = 0; c < n; c++)
		if (it[c].r.kind == DK_CHUNK && !it[c].refs && !it[c].prot) {
			file_drop(d, tx, it[c].name);
			freed += it[c].r.bytes;
			it[c].r.kind = 0;
		}
	(void)mdb_txn_commit(tx);
	return freed;
}

/* Makes room for `need` bytes (the budget, the free-space floor, the TTL),
 * keeping the chunks of the protected keys. 0, or MOOR_ENOSPACE when the
 * floor or the budget still binds with nothing left to give. */
static int make_room(cache *c, uint64_t need, const uint64_t *prot,
		     uint32_t n_prot)
{
	struct cache_disk_tier *d = c->disk;
	pthread_mutex_lock(&d->mu);
	while (d->reading)
		pthread_cond_wait(&d->done, &d->mu);
	pthread_mutex_unlock(&d->mu);
	dk_item *it;
	uint32_t n;
	uint64_t total;
	int rc = items_load(d, &it, &n, &total);
	if (rc)
		return rc;
	for (uint32_t j = 0; j < n_prot; j++) {
		int x = item_find(it, n, DK_CHUNK, prot[j], (j + 1) * d->grid);
		if (x >= 0)
			it[x].prot = 1;
	}
	uint64_t now = now_s(), ttl = (uint64_t)c->cfg.disk_days * 86400;
	for (uint32_t i = 0; i < n; i++)
		if (it[i].r.kind == DK_ANCHOR && ttl &&
		    now > it[i].r.used + ttl) {
			total -= cache_min64(total, evict(d, it, n, (int)i));
			pthread_mutex_lock(&d->mu);
			d->k.expired++;
			pthread_mutex_unlock(&d->mu);
		}
	uint64_t floor = c->cfg.disk_min_free;
	for (;;) {
		uint64_t fr = free_bytes(d);
		int over = total + need > c->cfg.disk_bytes;
		int low = fr < floor + need;
		if (!over && !low)
			break;
		int v = -1;
		double best = 0;
		for (uint32_t i = 0; i < n; i++) {
			if (it[i].r.kind != DK_ANCHOR)
				continue;
			double x = item_value(d, it, n, i, now);
			if (v < 0 || x < best) {
				v = (int)i;
				best = x;
			}
		}
		uint64_t freed = evict(d, it, n, v);
		if (v >= 0) {
			pthread_mutex_lock(&d->mu);
			d->k.evicted++;
			pthread_mutex_unlock(&d->mu);
		}
		total -= cache_min64(total, freed);
		if (v < 0 && !freed) {
			if (low) {
				pthread_mutex_lock(&d->mu);
				d->k.floor_binds++;
				pthread_mutex_unlock(&d->mu);
				if (now_s() >= (uint64_t)d->floor_said + 60) {
					d->floor_said = time(NULL);
					moor_warn(
					    "[disk] the free-space floor "
					    "binds: "
					    "%.1f GB free, floor %.1f GB: an "
					    "anchor of %.1f MB not written",
					    (double)fr / 1e9,
					    (double)floor / 1e9,
					    (double)need / 1e6);
				}
			}
			rc = MOOR_ENOSPACE;
			break;
		}
	}
	items_free(it, n);
	return rc;
}

/* ---- the writer ---- */

/* Chunk j of the job (rows [(j - 1) g, j g)) into wbuf; 0, 1 when the
 * fence took it, or the mover's negative code. */
static int chunk_stage(cache *c, dk_job *job, uint64_t j)
{
	struct cache_disk_tier *d = c->disk;
	uint64_t g = d->grid, b = j * g;
	pthread_mutex_lock(&d->mu);
	if (b > job->fence) {
		pthread_mutex_unlock(&d->mu);
		return 1;
	}
	d->copying = b;
	pthread_mutex_unlock(&d->mu);
	dk_hdr *h = (dk_hdr *)d->wbuf;
	uint8_t *ids = d->wbuf + d->chunk_hdr;
	uint8_t *rows = ids + g * 4;
	memcpy(ids, job->ids + (b - g), g * 4);
	uint64_t o = 0;
	int rc = 0;
	for (uint32_t i = 0; i < d->n_views && !rc; i++) {
		rc = cache_view_rows(d->mv, &d->vg[i], rows + o, g, 0,
				     d->view[i], d->window, b - g, g);
		o += g * d->vg[i].rowb;
	}
	/* complete before the fence may let a plan write these rows */
	if (!rc && d->mv->sync)
		rc = d->mv->sync(d->mv->ctx);
	pthread_mutex_lock(&d->mu);
	d->copying = 0;
	pthread_cond_broadcast(&d->done);
	pthread_mutex_unlock(&d->mu);
	if (rc)
		return rc;
	uint64_t data = g * 4 + g * d->row_bytes;
	memset(rows + g * d->row_bytes, 0, d->chunk_file - d->chunk_hdr - data);
	/* the header's line whole: its sum covers the bytes past the sums,
	 * which must not be the heap's leftovers */
	memset(d->wbuf + sizeof *h, 0, d->chunk_hdr - sizeof *h);
	hdr_init(d, h, DK_CHUNK, b, job->lph[j], data, 2, 0);
	uint64_t *sums = (uint64_t *)(h + 1);
	sums[0] = XXH3_64bits(ids, g * 4);
	sums[1] = XXH3_64bits(rows, g * d->row_bytes);
	hdr_seal(h);
	return 0;
}

static void count(struct cache_disk_tier *d, uint64_t *k, uint64_t n)
{
	pthread_mutex_lock(&d->mu);
	*k += n;
	pthread_mutex_unlock(&d->mu);
}

/* The writer yields to a spill save between two of its files (the save
 * has its own I/O path; at most 30 s, then it goes on). */
static void yield_to_spill(struct cache_disk_tier *d)
{
	pthread_mutex_lock(&d->mu);
	for (int i = 0; d->spilling && i < 300; i++) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 100000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&d->done, &d->mu, &ts);
	}
	pthread_mutex_unlock(&d->mu);
}

void cache_disk_spill_active(cache *c, int on)
{
	struct cache_disk_tier *d = c->disk;
	if (!d)
		return;
	pthread_mutex_lock(&d->mu);
	d->spilling = on;
	pthread_cond_broadcast(&d->done);
	pthread_mutex_unlock(&d->mu);
}

/* One anchor of a job: its missing chunks, then the anchor file. 0, or a
 * negative code when the job should stop (a write failed: the disk). */
/* The staged anchor file's sums (every section's, then the chain's hash
 * at each line it reads) and its header's seal, on the writer's thread. */
static void anchor_seal(struct cache_disk_tier *d, const dk_job *job,
			dk_ajob *a)
{
	uint64_t nk = a->line / d->grid;
	dk_hdr *h = (dk_hdr *)a->file;
	const uint8_t *secs = a->file + hdr_bytes(d->n_sec, nk);
	uint64_t *sums = (uint64_t *)(h + 1), o = 0;
	for (uint32_t k = 0; k < d->n_sec; k++) {
		sums[k] = XXH3_64bits(secs + o, d->secb[k]);
		o += d->secb[k];
	}
	memcpy(sums + d->n_sec, job->lph + 1, nk * 8);
	hdr_seal(h);
}

static int write_anchor(cache *c, dk_job *job, dk_ajob *a)
{
	struct cache_disk_tier *d = c->disk;
	uint64_t g = d->grid, nk = a->line / g;
	char name[48];
	/* what is missing */
	MDB_txn *tx;
	int rc = mdb_txn_begin(d->env, NULL, MDB_RDONLY, &tx);
	if (rc)
		return lmdb_rc(rc);
	uint8_t *miss = calloc(nk + 1, 1);
	if (!miss) {
		mdb_txn_abort(tx);
		return -ENOMEM;
	}
	uint64_t need = a->bytes;
	for (uint64_t j = 1; j <= nk; j++) {
		dk_rec r;
		name_of(name, sizeof name, DK_CHUNK, job->lph[j], j * g);
		if (idx_get(d, tx, name, &r, NULL) ||
		    faccessat(d->dfd, name, F_OK, 0)) {
			miss[j] = 1;
			need += d->chunk_file;
		}
	}
	mdb_txn_abort(tx);
	rc = make_room(c, need, job->lph + 1, (uint32_t)nk);
	if (rc) {
		free(miss);
		return 0; /* not written; the next anchor may fit */
	}
	double t0 = moor_now();
	uint64_t kept = 0;
	for (uint64_t j = 1; j <= nk && !rc; j++) {
		if (!miss[j]) {
			kept++;
			continue;
		}
		int st = chunk_stage(c, job, j);
		if (st < 0) {
			moor_warn("[disk] copying rows %llu to %llu out of the "
				  "live buffers: %s: the job stops",
				  (unsigned long long)((j - 1) * g),
				  (unsigned long long)(j * g),
				  moor_strerror(st));
			count(d, &d->k.write_failed, 1);
			free(miss);
			return st;
		}
		if (st) {
			count(d, &d->k.window, 1);
			free(miss);
			return 0;
		}
		yield_to_spill(d);
		name_of(name, sizeof name, DK_CHUNK, job->lph[j], j * g);
		int dir_ = 0;
		rc = file_write(d->dfd, name, d->wbuf, d->chunk_file, &dir_);
		count(d, dir_ ? &d->k.direct : &d->k.buffered, 1);
		if (rc) {
			moor_warn("[disk] writing %s: %s: the anchor at %llu "
				  "is not written",
				  name, moor_strerror(rc),
				  (unsigned long long)a->line);
			count(d, &d->k.write_failed, 1);
			break;
		}
		dk_rec r = {.kind = DK_CHUNK,
			    .line = j * g,
			    .key = job->lph[j],
			    .bytes = d->chunk_file,
			    .used = now_s(),
			    .made = now_s(),
			    .digest = d->digest};
		memcpy(r.fp, d->fp, 32);
		rc = idx_put(d, name, &r, NULL);
		if (rc) {
			unlinkat(d->dfd, name, 0);
			count(d, &d->k.write_failed, 1);
			break;
		}
		cache_ledger_wrote(c, CACHE_LEDGER_TIER, d->chunk_file);
		pthread_mutex_lock(&d->mu);
		d->k.chunks_written++;
		d->k.bytes_written += d->chunk_file;
		pthread_mutex_unlock(&d->mu);
	}
	free(miss);
	count(d, &d->k.chunks_kept, kept);
	if (rc)
		return rc;
	yield_to_spill(d);
	anchor_seal(d, job, a);
	name_of(name, sizeof name, DK_ANCHOR, job->lph[nk], a->line);
	int dir_ = 0;
	rc = file_write(d->dfd, name, a->file, a->bytes, &dir_);
	count(d, dir_ ? &d->k.direct : &d->k.buffered, 1);
	if (!rc) {
		dk_rec r = {.kind = DK_ANCHOR,
			    .n_keys = (uint32_t)nk,
			    .line = a->line,
			    .key = job->lph[nk],
			    .bytes = a->bytes,
			    .used = now_s(),
			    .made = now_s(),
			    .digest = d->digest};
		memcpy(r.fp, d->fp, 32);
		rc = idx_put(d, name, &r, job->lph + 1);
		if (rc)
			unlinkat(d->dfd, name, 0);
	}
	if (rc) {
		moor_warn("[disk] writing %s: %s", name, moor_strerror(rc));
		count(d, &d->k.write_failed, 1);
		return rc;
	}
	cache_ledger_wrote(c, CACHE_LEDGER_TIER, a->bytes);
	pthread_mutex_lock(&d->mu);
	d->k.anchors_written++;
	d->k.bytes_written += a->bytes;
	d->last_write_ms = (moor_now() - t0) * 1e3;
	pthread_mutex_unlock(&d->mu);
	moor_info("[disk] wrote the anchor at %llu (%llu chunks written, %llu "
		  "kept) in %.0f ms",
		  (unsigned long long)a->line, (unsigned long long)(nk - kept),
		  (unsigned long long)kept, (moor_now() - t0) * 1e3);
	return 0;
}

static void *alloc4k(uint64_t n);
static int rmap_make(struct cache_disk_tier *d, int populate);
static void rmap_drop(struct cache_disk_tier *d);

/* A staging slot for an anchor file (anchor_file bytes, aligned): a kept
 * one, else a new one; NULL when out of memory. */
static uint8_t *stage_take(struct cache_disk_tier *d)
{
	uint8_t *p = NULL;
	pthread_mutex_lock(&d->mu);
	if (d->n_spare)
		p = d->spare[--d->n_spare];
	pthread_mutex_unlock(&d->mu);
	return p ? p : alloc4k(d->anchor_file);
}

/* The job's staging slots back (kept or freed), mu held: the writer gives
 * them back before it says the job is done, so a detach that waited for
 * the queue finds every kept slot. */
static void stage_give_locked(struct cache_disk_tier *d, dk_job *j)
{
	for (uint32_t i = 0; i < j->n_anc; i++) {
		if (j->anc[i].file && d->n_spare < d->keep_spare)
			d->spare[d->n_spare++] = j->anc[i].file;
		else
			free(j->anc[i].file);
		j->anc[i].file = NULL;
	}
}

static void stage_clear(struct cache_disk_tier *d)
{
	pthread_mutex_lock(&d->mu);
	while (d->n_spare)
		free(d->spare[--d->n_spare]);
	pthread_mutex_unlock(&d->mu);
}

static void job_free(struct cache_disk_tier *d, dk_job *j)
{
	if (!j)
		return;
	pthread_mutex_lock(&d->mu);
	stage_give_locked(d, j);
	pthread_mutex_unlock(&d->mu);
	free(j->ids);
	free(j->lph);
	free(j);
}

static void *writer(void *arg)
{
	cache *c = arg;
	struct cache_disk_tier *d = c->disk;
	pthread_mutex_lock(&d->mu);
	for (;;) {
		while (!d->q && !d->stop)
			pthread_cond_wait(&d->work, &d->mu);
		if (!d->q)
			break;
		dk_job *job = d->q;
		d->running = 1;
		pthread_mutex_unlock(&d->mu);
		for (uint32_t i = 0; i < job->n_anc; i++) {
			pthread_mutex_lock(&d->mu);
			int fenced = job->anc[i].line > job->fence;
			pthread_mutex_unlock(&d->mu);
			if (fenced) {
				count(d, &d->k.window, job->n_anc - i);
				break;
			}
			if (write_anchor(c, job, &job->anc[i]))
				break;
		}
		pthread_mutex_lock(&d->mu);
		d->q = job->next;
		d->running = 0;
		stage_give_locked(d, job);
		pthread_cond_broadcast(&d->done);
		pthread_mutex_unlock(&d->mu);
		job_free(d, job);
		pthread_mutex_lock(&d->mu);
	}
	pthread_mutex_unlock(&d->mu);
	return NULL;
}

/* ---- lifecycle ---- */

static int mkdir_at(const char *path)
{
	if (mkdir(path, 0700) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

/* Indexes file nm from its header when the header reads back whole
 * (magic, version, its xxh3) and names what the file name and size say:
 * 1, else 0 (the caller deletes it). hb: a 4 KiB aligned buffer. The record
 * is what the writer would have put (hits 0, last used when made); the
 * attach sweeps another fingerprint's or layout's, as always. With `have`
 * (the record the index holds for nm) nothing is written when it says what
 * the header says. */
static int index_file(struct cache_disk_tier *d, const char *nm, uint8_t *hb,
		      const MDB_val *have)
{
	int ok = 0;
	uint8_t *full = NULL;
	int f = openat(d->dfd, nm, O_RDONLY | O_CLOEXEC);
	struct stat st;
	dk_hdr h;
	if (f >= 0 && fstat(f, &st) == 0 &&
	    pread(f, hb, DK_LINE, 0) == DK_LINE) {
		memcpy(&h, hb, sizeof h);
		char want[48];
		name_of(want, sizeof want, (int)h.kind, h.key, h.line);
		uint64_t nsk = h.n_sums + h.n_keys;
		ok = h.magic == DK_MAGIC && h.version == DK_VERSION &&
		     (h.kind == DK_CHUNK || h.kind == DK_ANCHOR) &&
		     !strcmp(want, nm) && nsk < (1u << 24) &&
		     h.hdr_bytes == hdr_bytes(h.n_sums, h.n_keys) &&
		     (uint64_t)st.st_size == h.hdr_bytes + up4k(h.data_bytes) &&
		     (h.kind == DK_ANCHOR || h.n_keys == 0);
	}
	if (ok) {
		full = alloc4k(h.hdr_bytes);
		ok = full &&
		     pread(f, full, h.hdr_bytes, 0) == (ssize_t)h.hdr_bytes;
	}
	if (ok) {
		dk_hdr *fh = (dk_hdr *)full;
		uint64_t want = fh->hdr_sum;
		fh->hdr_sum = 0;
		ok = XXH3_64bits(full, fh->hdr_bytes) == want;
	}
	if (ok) {
		dk_rec r = {.kind = h.kind,
			    .n_keys = (uint32_t)h.n_keys,
			    .line = h.line,
			    .key = h.key,
			    .bytes = (uint64_t)st.st_size,
			    .used = h.made,
			    .made = h.made,
			    .digest = h.digest};
		memcpy(r.fp, h.fp, 32);
		const uint64_t *keys =
		    (const uint64_t *)(full + sizeof h) + h.n_sums;
		/* the record there already says what the header says (its
		 * hits and last use are kept) */
		dk_rec o;
		if (have && have->mv_size == sizeof r + 8 * h.n_keys) {
			memcpy(&o, have->mv_data, sizeof o);
			if (o.kind == r.kind && o.n_keys == r.n_keys &&
			    o.line == r.line && o.key == r.key &&
			    o.bytes == r.bytes && o.digest == r.digest &&
			    !memcmp(o.fp, r.fp, 32) &&
			    !memcmp((const char *)have->mv_data + sizeof o,
				    keys, 8 * h.n_keys)) {
				free(full);
				close(f);
				return 1;
			}
		}
		ok = idx_put(d, nm, &r, keys) == 0;
		if (ok && have)
			d->k.reindexed++;
	}
	free(full);
	if (f >= 0)
		close(f);
	return ok;
}

/* A damaged index was replaced by an empty one (kvdb.h): the files are
 * the index (their headers), so every file whose header reads back whole
 * and names what its file name says is indexed again (hits 0, last used
 * when it was made); the others go. The cold-line counts and the sessions
 * seen are traffic, and are lost with the old index. The attach then
 * sweeps what another fingerprint or layout wrote, as after any start. */
static void index_rebuild(cache *c, const char *why)
{
	struct cache_disk_tier *d = c->disk;
	int fd = openat(d->dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
	if (!dir) {
		if (fd >= 0)
			close(fd);
		return;
	}
	uint8_t *hb = alloc4k(DK_LINE);
	uint64_t kept = 0, bad = 0;
	struct dirent *e;
	while (hb && (e = readdir(dir))) {
		const char *nm = e->d_name;
		if ((nm[0] != 'a' && nm[0] != 'c') || nm[1] != '-' ||
		    strlen(nm) >= 48 || strstr(nm, ".tmp"))
			continue;
		if (index_file(d, nm, hb, NULL)) {
			kept++;
		} else {
			unlinkat(d->dfd, nm, 0);
			bad++;
		}
	}
	free(hb);
	closedir(dir);
	d->k.rebuilt++;
	d->k.orphans += bad;
	moor_warn("[disk] the index was damaged (%s): moved aside as "
		  "data.mdb.bad and rebuilt from the files' headers: %llu "
		  "files indexed again, %llu unreadable deleted (the cold-line "
		  "counts are lost)",
		  why, (unsigned long long)kept, (unsigned long long)bad);
}

/* Every record against its file's header (a 4 KiB read a file, once at
 * the open): one a damaged page changed (another line, key, fingerprint,
 * size, chunk keys) is written again from the header, which the writer
 * sealed; a file whose header does not read back whole goes with its
 * record. Records whose file is gone are reconcile's. */
static void verify_records(struct cache_disk_tier *d)
{
	MDB_txn *tx;
	MDB_cursor *cu;
	if (mdb_txn_begin(d->env, NULL, MDB_RDONLY, &tx))
		return;
	if (mdb_cursor_open(tx, d->idx, &cu)) {
		mdb_txn_abort(tx);
		return;
	}
	char(*names)[48] = NULL;
	size_t n = 0, cap = 0;
	MDB_val k, v;
	int op = MDB_FIRST;
	while (!mdb_cursor_get(cu, &k, &v, op)) {
		op = MDB_NEXT;
		if (k.mv_size == 0 || k.mv_size >= 48)
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 64;
			char(*nn)[48] = realloc(names, cap * sizeof *names);
			if (!nn)
				break;
			names = nn;
		}
		memcpy(names[n], k.mv_data, k.mv_size);
		names[n][k.mv_size] = 0;
		n++;
	}
	mdb_cursor_close(cu);
	mdb_txn_abort(tx);
	uint8_t *hb = alloc4k(DK_LINE);
	for (size_t i = 0; hb && i < n; i++) {
		if (faccessat(d->dfd, names[i], F_OK, 0))
			continue;
		void *cp = NULL;
		MDB_val have = {0, NULL};
		if (!mdb_txn_begin(d->env, NULL, MDB_RDONLY, &tx)) {
			MDB_val kk = {strlen(names[i]), names[i]};
			if (!mdb_get(tx, d->idx, &kk, &v) &&
			    (cp = malloc(v.mv_size ? v.mv_size : 1))) {
				memcpy(cp, v.mv_data, v.mv_size);
				have.mv_size = v.mv_size;
				have.mv_data = cp;
			}
			mdb_txn_abort(tx);
		}
		if (!index_file(d, names[i], hb, &have)) {
			file_drop1(d, names[i]);
			d->k.orphans++;
		}
		free(cp);
	}
	free(hb);
	free(names);
}

/* The open's reconciliation: every record whose file is gone, every file
 * the index does not name, every anchor past the TTL. */
static void reconcile(cache *c)
{
	struct cache_disk_tier *d = c->disk;
	verify_records(d);
	dk_item *it;
	uint32_t n;
	uint64_t total;
	if (items_load(d, &it, &n, &total))
		return;
	MDB_txn *tx;
	if (!mdb_txn_begin(d->env, NULL, 0, &tx)) {
		for (uint32_t i = 0; i < n; i++)
			if (faccessat(d->dfd, it[i].name, F_OK, 0)) {
				MDB_val k = {strlen(it[i].name), it[i].name};
				(void)mdb_del(tx, d->idx, &k, NULL);
				/* gone (its chunks stay counted as read) */
				if (it[i].r.kind == DK_ANCHOR)
					it[i].r.kind = 0;
			}
		(void)mdb_txn_commit(tx);
	}
	/* past the TTL: the anchor goes with the chunks only it read, as an
	 * eviction takes them (none is left that no anchor reads) */
	uint64_t now = now_s(), ttl = (uint64_t)c->cfg.disk_days * 86400;
	for (uint32_t i = 0; ttl && i < n; i++)
		if (it[i].r.kind == DK_ANCHOR && now > it[i].r.used + ttl) {
			(void)evict(d, it, n, (int)i);
			d->k.expired++;
		}
	/* a directory stream of its own (a dup would share dfd's offset) */
	int fd = openat(d->dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
	if (!dir) {
		if (fd >= 0)
			close(fd);
		items_free(it, n);
		return;
	}
	MDB_txn *rt;
	if (mdb_txn_begin(d->env, NULL, MDB_RDONLY, &rt)) {
		closedir(dir);
		items_free(it, n);
		return;
	}
	uint8_t *hb = alloc4k(DK_LINE);
	struct dirent *e;
	while ((e = readdir(dir))) {
		if ((e->d_name[0] != 'a' && e->d_name[0] != 'c') ||
		    e->d_name[1] != '-')
			continue;
		dk_rec r;
		if (idx_get(d, rt, e->d_name, &r, NULL) != -ENOENT)
			continue;
		/* a crash between the rename and the index, or a record a
		 * damaged page lost: a whole file is indexed again */
		if (hb && index_file(d, e->d_name, hb, NULL)) {
			d->k.reindexed++;
		} else {
			unlinkat(d->dfd, e->d_name, 0);
			d->k.orphans++;
		}
	}
	free(hb);
	mdb_txn_abort(rt);
	closedir(dir);
	items_free(it, n);
}

int cache_disk_open(cache *c, char *err)
{
	c->disk = NULL;
	if (!c->cfg.spill_dir[0] || !c->cfg.disk_on)
		return 0;
	struct cache_disk_tier *d = calloc(1, sizeof *d);
	if (!d)
		return -ENOMEM;
	d->mv = c->mv;
	if (c->cfg.dev_cuda >= 0) {
		char why[MOOR_ERRLEN];
		if (arena_cuda_mover_twin(c->mv, &d->mv_own, why)) {
			/* a cache not kept is the cold path, never a refusal
			 * to start */
			moor_warn("[disk] the tier is off: its writer's "
				  "mover: %s",
				  why);
			free(d);
			return 0;
		}
		d->mv = d->mv_own;
	}
	d->dfd = -1;
	d->read_bps = 1e9; /* until a restore measures it */
	char path[400];
	snprintf(path, sizeof path, "%s/disk", c->cfg.spill_dir);
	int rc = mkdir_at(c->cfg.spill_dir);
	if (!rc)
		rc = mkdir_at(path);
	if (!rc) {
		d->dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (d->dfd < 0)
			rc = -errno;
	}
	if (rc) {
		moor_errf(err, "disk tier %s: %s", path, moor_strerror(rc));
		arena_cuda_mover_free(d->mv_own);
		free(d);
		return rc;
	}
	(void)dfile_sweep_tmp(d->dfd);
	snprintf(path, sizeof path, "%s/disk/index", c->cfg.spill_dir);
	rc = mkdir_at(path);
	MDB_txn *tx = NULL;
	int rebuilt = 0;
	char why[MOOR_ERRLEN] = "";
	if (!rc)
		rc = kvdb_open(path, 1ull << 30, 8, &d->env, &rebuilt, why);
	if (!rc)
		rc = lmdb_rc(mdb_txn_begin(d->env, NULL, 0, &tx));
	if (!rc)
		rc = lmdb_rc(mdb_dbi_open(tx, "idx", MDB_CREATE, &d->idx));
	if (!rc)
		rc = lmdb_rc(mdb_dbi_open(tx, "cnt", MDB_CREATE, &d->cnt));
	if (!rc)
		rc = lmdb_rc(mdb_dbi_open(tx, "sess", MDB_CREATE, &d->sess));
	if (!rc) {
		rc = lmdb_rc(mdb_txn_commit(tx));
		tx = NULL;
	}
	if (tx)
		mdb_txn_abort(tx);
	if (rc) {
		/* the tier is off, cached serves: a cache not kept is the
		 * cold path, never a refusal to start */
		moor_warn("[disk] the tier is off: its index %s: %s", path,
			  why[0] ? why : moor_strerror(rc));
		if (d->env)
			mdb_env_close(d->env);
		close(d->dfd);
		arena_cuda_mover_free(d->mv_own);
		free(d);
		(void)err;
		return 0;
	}
	pthread_mutex_init(&d->mu, NULL);
	pthread_cond_init(&d->work, NULL);
	pthread_cond_init(&d->done, NULL);
	c->disk = d;
	if (rebuilt)
		index_rebuild(c, why);
	reconcile(c);
	if (pthread_create(&d->th, NULL, writer, c)) {
		moor_errf(err, "disk tier: the writer thread");
		cache_disk_close(c);
		return -EAGAIN;
	}
	d->th_on = 1;
	moor_info("[disk] %s/disk: budget %.1f GB, %u days, free-space floor "
		  "%.1f GB, admit after %u, %u head anchors from %u tokens",
		  c->cfg.spill_dir, (double)c->cfg.disk_bytes / 1e9,
		  c->cfg.disk_days, (double)c->cfg.disk_min_free / 1e9,
		  c->cfg.disk_admit_after, c->cfg.disk_head_anchors,
		  c->cfg.disk_min_tokens);
	return 0;
}

/* Waits until no job runs or waits (fenced at `fence` first). */
static void drain_queue(struct cache_disk_tier *d, uint64_t fence)
{
	pthread_mutex_lock(&d->mu);
	for (dk_job *j = d->q; j; j = j->next)
		j->fence = cache_min64(j->fence, fence);
	while (d->q)
		pthread_cond_wait(&d->done, &d->mu);
	pthread_mutex_unlock(&d->mu);
}

void cache_disk_detach(cache *c)
{
	struct cache_disk_tier *d = c->disk;
	if (!d || !d->attached)
		return;
	drain_queue(d, 0);
	d->attached = 0;
	stage_clear(d); /* sized for this layout */
	free(d->vg);
	free(d->view);
	free(d->secb);
	free(d->lph);
	free(d->wbuf);
	rmap_drop(d);
	d->vg = NULL;
	d->view = NULL;
	d->secb = NULL;
	d->lph = NULL;
	d->wbuf = NULL;
}

void cache_disk_close(cache *c)
{
	struct cache_disk_tier *d = c->disk;
	if (!d)
		return;
	cache_disk_detach(c);
	if (d->th_on) {
		pthread_mutex_lock(&d->mu);
		d->stop = 1;
		pthread_cond_broadcast(&d->work);
		pthread_mutex_unlock(&d->mu);
		pthread_join(d->th, NULL);
	}
	while (d->q) {
		dk_job *j = d->q;
		d->q = j->next;
		job_free(d, j);
	}
	stage_clear(d);
	pthread_mutex_destroy(&d->mu);
	pthread_cond_destroy(&d->work);
	pthread_cond_destroy(&d->done);
	mdb_env_close(d->env);
	close(d->dfd);
	arena_cuda_mover_free(d->mv_own);
	free(d);
	c->disk = NULL;
}

int cache_disk_wait(cache *c)
{
	if (c->disk)
		drain_queue(c->disk, UINT64_MAX);
	return 0;
}

static void *alloc4k(uint64_t n)
{
	void *p = NULL;
	if (posix_memalign(&p, DK_LINE, n ? n : DK_LINE))
		return NULL;
	return p;
}

/* The restore's private staging (rmap), populated or not. */
static int rmap_make(struct cache_disk_tier *d, int populate)
{
	uint64_t n = d->rbuf0_bytes + (DK_RBUF - 1) * d->chunk_file;
	void *p = mmap(
	    NULL, n, PROT_READ | PROT_WRITE,
	    MAP_PRIVATE | MAP_ANONYMOUS | (populate ? MAP_POPULATE : 0), -1, 0);
	if (p == MAP_FAILED)
		return -ENOMEM;
	d->rmap = p;
	d->rmap_bytes = n;
	return 0;
}

static void rmap_drop(struct cache_disk_tier *d)
{
	if (d->rmap)
		munmap(d->rmap, d->rmap_bytes);
	d->rmap = NULL;
	d->rmap_bytes = 0;
}

void cache_disk_attach(cache *c)
{
	struct cache_disk_tier *d = c->disk;
	if (!d)
		return;
	cache_disk_detach(c);
	const cache_layout *l = c->lay;
	d->grid = l->grid;
	d->window = l->window;
	d->row_bytes = c->row_bytes;
	d->sec_bytes = c->sec_bytes;
	d->n_views = l->n_views;
	d->n_sec = l->n_sections;
	d->digest = cache_tier_layout_digest(l, DK_VERSION);
	memcpy(d->fp, l->fingerprint, 32);
	d->vg = malloc((d->n_views + 1) * sizeof *d->vg);
	d->view = malloc((d->n_views + 1) * sizeof *d->view);
	d->secb = malloc((d->n_sec + 1) * sizeof *d->secb);
	d->lph = malloc((l->window / l->grid + 2) * sizeof *d->lph);
	d->chunk_hdr = hdr_bytes(2, 0);
	d->chunk_file = d->chunk_hdr + up4k(d->grid * (4 + d->row_bytes));
	d->anchor_hdr = hdr_bytes(d->n_sec, l->window / l->grid);
	d->anchor_file = d->anchor_hdr + up4k(d->sec_bytes);
	d->keep_spare = c->cfg.disk_head_anchors < 1 ? 1
			: c->cfg.disk_head_anchors > DK_SPARE_MAX
			    ? DK_SPARE_MAX
			    : c->cfg.disk_head_anchors;
	d->rbuf0_bytes = cache_max64(d->chunk_file, d->anchor_file);
	d->wbuf = alloc4k(d->chunk_file);
	int rm = c->mv == &arena_mover_memcpy ? rmap_make(d, 1) : 0;
	if (!d->vg || !d->view || !d->secb || !d->lph || !d->wbuf || rm) {
		moor_warn("[disk] out of memory for the staging buffers: the "
			  "tier is off for this engine");
		d->attached = 1;
		cache_disk_detach(c);
		return;
	}
	for (uint32_t i = 0; i < d->n_views; i++) {
		d->vg[i] = c->vg[i];
		d->view[i] = cache_dev_at(c, c->view_off[i]);
	}
	for (uint32_t i = 0; i < d->n_sec; i++)
		d->secb[i] = l->sec[i].bytes;
	d->attached = 1;
	/* files of another fingerprint or layout: the rows of another
	 * arithmetic are not a cold prefill's */
	dk_item *it;
	uint32_t n;
	uint64_t total, swept = 0;
	if (items_load(d, &it, &n, &total))
		return;
	MDB_txn *tx;
	if (!mdb_txn_begin(d->env, NULL, 0, &tx)) {
		for (uint32_t i = 0; i < n; i++)
			if (it[i].r.digest != d->digest ||
			    !cache_ledger_fp_ok(c, it[i].r.fp)) {
				file_drop(d, tx, it[i].name);
				swept++;
			}
		(void)mdb_txn_commit(tx);
	}
	items_free(it, n);
	d->k.swept += swept;
	if (swept)
		moor_info("[disk] swept %llu files of another fingerprint or "
			  "layout (the cold-line counts stay)",
			  (unsigned long long)swept);
}

/* ---- the plan: fence, admission, counts ---- */

void cache_disk_fence(cache *c, uint64_t line)
{
	struct cache_disk_tier *d = c->disk;
	if (!d)
		return;
	pthread_mutex_lock(&d->mu);
	for (dk_job *j = d->q; j; j = j->next)
		j->fence = cache_min64(j->fence, line);
	while (d->copying > line)
		pthread_cond_wait(&d->done, &d->mu);
	pthread_mutex_unlock(&d->mu);
}

static int on(cache *c)
{
	return c->disk && c->disk->attached;
}

static int anchor_indexed(struct cache_disk_tier *d, MDB_txn *tx, uint64_t key,
			  uint64_t line)
{
	char name[48];
	dk_rec r;
	name_of(name, sizeof name, DK_ANCHOR, key, line);
	return idx_get(d, tx, name, &r, NULL) == 0;
}

void cache_disk_plan(cache *c, const cache_turn *t, const uint64_t *lines,
		     uint32_t n, int *want)
{
	struct cache_disk_tier *d = c->disk;
	memset(want, 0, n * sizeof *want);
	if (!on(c))
		return;
	d->plan_n = 0;
	if (t->guest || t->no_cache || !n || t->n < c->cfg.disk_min_tokens)
		return;
	uint64_t g = d->grid;
	for (uint64_t j = 0; j <= t->n / g; j++)
		d->lph[j] = c->ph[j * g];
	d->plan_n = t->n;
	/* the counts of the lines this prefill forwards */
	uint32_t *cnt = calloc(n, sizeof *cnt);
	if (!cnt)
		return;
	MDB_txn *tx;
	if (mdb_txn_begin(d->env, NULL, 0, &tx)) {
		free(cnt);
		return;
	}
	for (uint32_t j = 0; j < n; j++) {
		uint64_t kk[2] = {c->ph[lines[j]], lines[j]};
		MDB_val k = {16, kk}, v;
		uint32_t x = 0;
		if (!mdb_get(tx, d->cnt, &k, &v) && v.mv_size == 4)
			memcpy(&x, v.mv_data, 4);
		x++;
		cnt[j] = x;
		v.mv_size = 4;
		v.mv_data = &x;
		(void)mdb_put(tx, d->cnt, &k, &v, 0);
	}
	int first = 0;
	if (!cache_session_none(t->session)) {
		uint64_t sh = cache_ids_hash(NULL, 0);
		for (const char *p = t->session; *p; p++) {
			sh ^= (uint8_t)*p;
			sh *= 0x100000001b3ull;
		}
		MDB_val k = {8, &sh}, v;
		if (mdb_get(tx, d->sess, &k, &v) == MDB_NOTFOUND) {
			uint64_t now = now_s();
			v.mv_size = 8;
			v.mv_data = &now;
			first = mdb_put(tx, d->sess, &k, &v, 0) == 0;
		}
	}
	int crc = mdb_txn_commit(tx);
	if (crc) {
		/* the index cannot take a write (a full disk): nothing is
		 * planned, the request runs as without the tier */
		d->k.index_failed++;
		if (now_s() >= (uint64_t)d->index_said + 60) {
			d->index_said = time(NULL);
			moor_warn("[disk] the index refuses a write (%s): the "
				  "tier plans nothing until it takes one",
				  moor_strerror(lmdb_rc(crc)));
		}
		free(cnt);
		return;
	}
	d->k.counted += n;
	uint32_t clean = 0; /* lines [0, clean) are below the taint */
	while (clean < n &&
	       (t->taint == CACHE_NO_TAINT || lines[clean] <= t->taint))
		clean++;
	uint32_t aa = c->cfg.disk_admit_after;
	/* the longest line counted admit_after times */
	for (uint32_t j = clean; j-- > 0;)
		if (cnt[j] >= aa) {
			want[j] = 1;
			break;
		}
	/* branch lines: the count falls at the next line */
	uint32_t nb = 0;
	for (uint32_t j = clean; j-- > 0 && nb < DK_BRANCH_MAX;)
		if (j + 1 < n && cnt[j] >= aa && cnt[j + 1] < cnt[j]) {
			want[j] = 1;
			nb++;
		}
	/* the head of a session's first long request: the last lines at or
	 * below where its last user message starts (the next session in the
	 * same folder parts from it there), else the prompt's last lines */
	if (first) {
		uint32_t top = clean;
		while (t->user_at && top > 0 && lines[top - 1] > t->user_at)
			top--;
		for (uint32_t j = top, h = 0;
		     j-- > 0 && h < c->cfg.disk_head_anchors; h++)
			want[j] = 1;
	}
	free(cnt);
	if (mdb_txn_begin(d->env, NULL, MDB_RDONLY, &tx))
		return;
	uint32_t m = 0;
	for (uint32_t j = n; j-- > 0;) {
		if (!want[j])
			continue;
		if (anchor_indexed(d, tx, c->ph[lines[j]], lines[j]) ||
		    m >= DK_JOB_MAX) {
			want[j] = 0;
			d->k.skipped_have++;
			continue;
		}
		m++;
	}
	mdb_txn_abort(tx);
	/* the write guard: past the day's budget the tier plans nothing
	 * (the lines above stay counted: they are traffic) */
	if (m && !cache_ledger_allow(c, CACHE_LEDGER_TIER_PLAN, t->n)) {
		memset(want, 0, n * sizeof *want);
		d->k.guard_skips++;
		return;
	}
	d->k.admitted += m;
}

void cache_disk_commit(cache *c, const cache_turn *t, uint32_t n_filled)
{
	struct cache_disk_tier *d = c->disk;
	if (!on(c))
		return;
	if (!d->plan_n || d->plan_n != t->n || t->guest || t->no_cache)
		return;
	dk_job *job = calloc(1, sizeof *job);
	if (!job)
		return;
	job->fence = UINT64_MAX;
	uint64_t g = d->grid;
	for (uint32_t i = 0; i < n_filled && job->n_anc < DK_JOB_MAX; i++) {
		const cache_tslot *s = &t->slot[i];
		if (!s->disk ||
		    (t->taint != CACHE_NO_TAINT && s->line > t->taint))
			continue;
		uint64_t nk = s->line / g;
		dk_ajob *a = &job->anc[job->n_anc];
		a->line = s->line;
		a->bytes = hdr_bytes(d->n_sec, nk) + up4k(d->sec_bytes);
		a->file = stage_take(d);
		if (!a->file)
			break;
		dk_hdr *h = (dk_hdr *)a->file;
		uint64_t hb = hdr_bytes(d->n_sec, nk);
		memset(a->file, 0, hb);
		uint8_t *secs = a->file + hb;
		if (c->mv->copy(c->mv->ctx, secs, cache_dev_at(c, s->off),
				d->sec_bytes)) {
			job->n_anc++; /* this slot back with the others */
			(void)cache_sync(c);
			job_free(d, job);
			return;
		}
		memset(secs + d->sec_bytes, 0, a->bytes - hb - d->sec_bytes);
		/* the sums and the seal are the writer's (anchor_seal): only
		 * the copy is on the commit's path */
		hdr_init(d, h, DK_ANCHOR, s->line, d->lph[nk], d->sec_bytes,
			 d->n_sec, nk);
		job->top = cache_max64(job->top, s->line);
		job->n_anc++;
	}
	/* the copies complete before the slots go back (on a CUDA arena the
	 * mover's are asynchronous) */
	if (!job->n_anc || cache_sync(c)) {
		job_free(d, job);
		return;
	}
	job->ids = malloc(job->top * sizeof *job->ids);
	job->lph = malloc((job->top / g + 1) * sizeof *job->lph);
	if (!job->ids || !job->lph) {
		job_free(d, job);
		return;
	}
	memcpy(job->ids, t->ids, job->top * sizeof *job->ids);
	memcpy(job->lph, d->lph, (job->top / g + 1) * sizeof *job->lph);
	pthread_mutex_lock(&d->mu);
	uint32_t nq = 0;
	dk_job **tail = &d->q;
	while (*tail) {
		tail = &(*tail)->next;
		nq++;
	}
	if (nq > DK_QUEUE_MAX) {
		d->k.busy += job->n_anc;
		pthread_mutex_unlock(&d->mu);
		job_free(d, job);
		return;
	}
	*tail = job;
	pthread_cond_broadcast(&d->work);
	pthread_mutex_unlock(&d->mu);
}

/* ---- the lookup and the restore ---- */

/* The planner's offer: 1 and *start when an anchor line above `ram`
 * (what RAM and the spill offer) is on the disk with every chunk above the
 * clean rows in place (k) and its read costs less than the prefill it
 * saves. c->ph holds the prompt's chain hashes. */
static int disk_offer(cache *c, const int32_t *ids, uint64_t n, uint64_t ram,
		      uint64_t k, uint64_t *start)
{
	(void)ids;
	struct cache_disk_tier *d = c->disk;
	if (!on(c) || n < 2)
		return 0;
	uint64_t g = d->grid;
	MDB_txn *tx;
	if (mdb_txn_begin(d->env, NULL, MDB_RDONLY, &tx))
		return 0;
	int got = 0;
	double tps = cache_prefill_rate(c);
	for (uint64_t L = (n - 1) / g * g; L > ram && L >= g; L -= g) {
		char name[48];
		dk_rec r;
		name_of(name, sizeof name, DK_ANCHOR, c->ph[L], L);
		if (idx_get(d, tx, name, &r, NULL) || r.digest != d->digest ||
		    !cache_ledger_fp_ok(c, r.fp))
			continue;
		uint64_t bytes = r.bytes, j0 = cache_min64(k, L) / g;
		int ok = 1;
		for (uint64_t j = j0 + 1; j <= L / g && ok; j++) {
			name_of(name, sizeof name, DK_CHUNK, c->ph[j * g],
				j * g);
			ok = idx_get(d, tx, name, &r, NULL) == 0;
			bytes += r.bytes;
		}
		if (!ok)
			continue;
		double cost = (double)bytes / d->read_bps,
		       saved = (double)(L - ram) / tps;
		if (cost < saved) {
			*start = L;
			got = 1;
		}
		break;
	}
	mdb_txn_abort(tx);
	return got;
}

static void touch(struct cache_disk_tier *d, const char *name)
{
	MDB_txn *tx;
	if (mdb_txn_begin(d->env, NULL, 0, &tx))
		return;
	MDB_val k = {strlen(name), (void *)name}, v;
	if (!mdb_get(tx, d->idx, &k, &v) && v.mv_size >= sizeof(dk_rec)) {
		void *cp = malloc(v.mv_size);
		if (cp) {
			memcpy(cp, v.mv_data, v.mv_size);
			dk_rec *r = cp;
			r->hits++;
			r->used = now_s();
			MDB_val nv = {v.mv_size, cp};
			(void)mdb_put(tx, d->idx, &k, &nv, 0);
			free(cp);
		}
	}
	(void)mdb_txn_commit(tx);
}

/* Chunk file b (rows [b - g, b)) in buf: its header, its sums and every
 * stored id against the prompt's. */
static int chunk_check(cache *c, const int32_t *ids, uint64_t b,
		       const uint8_t *buf)
{
	struct cache_disk_tier *d = c->disk;
	uint64_t g = d->grid;
	dk_hdr *h = (dk_hdr *)buf;
	int rc = hdr_check(c, h, DK_CHUNK, b, c->ph[b], 2, 0);
	const uint8_t *pi = buf + d->chunk_hdr;
	const uint8_t *pr = pi + g * 4;
	const uint64_t *sums = (const uint64_t *)(h + 1);
	if (!rc && (h->data_bytes != g * (4 + d->row_bytes) ||
		    XXH3_64bits(pi, g * 4) != sums[0] ||
		    XXH3_64bits(pr, g * d->row_bytes) != sums[1]))
		rc = MOOR_EFORMAT;
	/* the stored ids against the prompt's, every one */
	if (!rc && memcmp(pi, ids + (b - g), g * 4))
		rc = MOOR_EFORMAT;
	return rc;
}

/* The rows of chunk file b in buf (chunk_check passed) into the live
 * rows. */
static int chunk_copy(cache *c, uint64_t b, const uint8_t *buf)
{
	struct cache_disk_tier *d = c->disk;
	uint64_t g = d->grid;
	return cache_rows_in(c, buf + d->chunk_hdr + g * 4, g, 0, b - g, g);
}

/* The anchor file at s in buf: its header, its sections' sums and the
 * chunk keys below it. Its sections start at buf + *secs. */
static int anchor_check(cache *c, uint64_t s, const uint8_t *buf,
			uint64_t *secs)
{
	struct cache_disk_tier *d = c->disk;
	uint64_t nk = s / d->grid, hb = hdr_bytes(d->n_sec, nk);
	dk_hdr *h = (dk_hdr *)buf;
	int rc = hdr_check(c, h, DK_ANCHOR, s, c->ph[s], d->n_sec, nk);
	const uint64_t *sums = (const uint64_t *)(h + 1);
	*secs = hb;
	if (!rc && h->data_bytes != d->sec_bytes)
		rc = MOOR_EFORMAT;
	for (uint64_t i = 0, o = 0; !rc && i < d->n_sec; i++) {
		if (XXH3_64bits(buf + hb + o, d->secb[i]) != sums[i])
			rc = MOOR_EFORMAT;
		o += d->secb[i];
	}
	for (uint64_t j = 1; !rc && j <= nk; j++)
		if (sums[d->n_sec + j - 1] != c->ph[j * d->grid])
			rc = MOOR_EFORMAT;
	return rc;
}

/* ---- the restore's pipeline ----
 *
 * The files (the anchor first, then the chunks above the clean rows in
 * place) are read in pieces of DK_PIECE bytes, in order, by DK_READERS
 * reader threads: that many reads in flight, so the drive is never idle
 * between two files or while one is checked. File i goes to staging
 * buffer i % DK_RBUF (the first holds an anchor file or a chunk file, the
 * others a chunk file); a reader starts a piece of file i only once file
 * i - DK_RBUF, the buffer's last, is applied (`applied`). The daemon's
 * thread takes the files in order: it waits for file i's last piece, checks
 * it (header, sums, ids), copies it into the live buffers and gives its
 * buffer back. The anchor comes first so that its checks and copies run
 * while the chunks are read. A reader never waits for a file below the one
 * the daemon's thread waits for, so the readers always progress. When a
 * file fails, `stop` sends every reader home (no read is started after it,
 * none waits for a buffer), and the daemon's thread joins them before the
 * buffers are touched again.
 *
 * Staging: where the mover copies asynchronously (the CUDA mover), blocks
 * of the host arena, which it registered: the copies to the device are
 * DMA at the link's rate, and each buffer goes back to the readers only
 * after the mover's sync (every file is synced, whatever the mover). Where
 * the host arena has no room, and with the memcpy mover, private memory,
 * mapped at the attach and populated there with the memcpy mover (a fresh
 * page's first write, the reads' DMA included, is dearer than the read of
 * its 4 KiB on a VM). Either way DK_RBUF buffers, about 150 + 2 x 104 MiB
 * on the 27B, for the restore's time when in the host arena.
 *
 * The resident anchor of the restored line (the live sections copied to a
 * block of the anchors' budget) is reserved after the anchor's copy and
 * placed after the last chunk; on a host-mapped arena a thread of its own
 * (the adopter) copies it meanwhile: the block's pages are often fresh
 * (the arena punches what it frees), 150 MiB of faults. */

typedef struct rd_pipe {
	struct cache_disk_tier *d;
	uint32_t n;	  /* files: the anchor, then the chunks */
	char (*name)[48]; /* [n] */
	uint64_t *bytes;  /* [n] */
	uint64_t *p0;	  /* [n + 1]: file i's first piece */
	uint32_t *left;	  /* [n]: its pieces not read yet */
	int *rc;	  /* [n]: its first failed piece's */
	uint8_t *buf[DK_RBUF];
	pthread_mutex_t mu;
	pthread_cond_t cv; /* a file read whole, a buffer free, stop */
	uint64_t next;	   /* the next piece nobody took */
	uint32_t cur;	   /* its file */
	uint32_t applied;  /* files the daemon's thread is done with */
	int stop;
	double t0, t1; /* the reads' span (moor_now) */
} rd_pipe;

/* Bytes [off, off + len) of file name (exactly `total` bytes long) into
 * buf + off. The first piece asks the fault seam, once a file. */
static int piece_read(int dfd, const char *name, uint8_t *buf, uint64_t off,
		      uint64_t len, uint64_t total)
{
	int rc = off ? 0 : fault(DFILE_OP_READ, name);
	if (rc < 0)
		return rc;
	int direct, fd = open_direct(dfd, name, O_RDONLY, &direct);
	if (fd < 0)
		return fd;
	struct stat st;
	if (fstat(fd, &st) < 0 || (uint64_t)st.st_size != total) {
		close(fd);
		return MOOR_ETRUNC;
	}
	uint64_t got = 0;
	while (got < len) {
		ssize_t r =
		    pread(fd, buf + off + got, len - got, (off_t)(off + got));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			rc = r < 0 ? -errno : MOOR_ETRUNC;
			break;
		}
		got += (uint64_t)r;
	}
	if (!direct)
		(void)posix_fadvise(fd, (off_t)off, (off_t)len,
				    POSIX_FADV_DONTNEED);
	close(fd);
	return rc;
}

static uint64_t piece_len(const rd_pipe *p, uint32_t i, uint64_t k)
{
	uint64_t off = (k - p->p0[i]) * DK_PIECE;
	return cache_min64(DK_PIECE, p->bytes[i] - off);
}

static void *reader(void *arg)
{
	rd_pipe *p = arg;
	pthread_mutex_lock(&p->mu);
	while (!p->stop && p->next < p->p0[p->n]) {
		uint64_t k = p->next++;
		while (k >= p->p0[p->cur + 1])
			p->cur++;
		uint32_t i = p->cur;
		/* the buffer's last file, i - DK_RBUF, applied */
		while (!p->stop && p->applied + DK_RBUF <= i)
			pthread_cond_wait(&p->cv, &p->mu);
		if (p->stop)
			break;
		pthread_mutex_unlock(&p->mu);
		uint64_t off = (k - p->p0[i]) * DK_PIECE;
		double t0 = moor_now();
		int rc = piece_read(p->d->dfd, p->name[i], p->buf[i % DK_RBUF],
				    off, piece_len(p, i, k), p->bytes[i]);
		double t1 = moor_now();
		pthread_mutex_lock(&p->mu);
		if (!p->t0 || t0 < p->t0)
			p->t0 = t0;
		if (t1 > p->t1)
			p->t1 = t1;
		if (rc && !p->rc[i])
			p->rc[i] = rc;
		if (--p->left[i] == 0)
			pthread_cond_broadcast(&p->cv);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

/* On a host-mapped device arena (the memcpy mover) the live sections' and
 * rows' pages may be fresh (a new cached, rows no prefill wrote yet): the
 * first write of each faults, and on a VM each fault can cost 2-20 us,
 * about the read of its 4 KiB. Toucher threads fault them in ahead of the
 * copies (the sections first, while the anchor is read, then the chunks in
 * order) by an atomic add of 0 to one byte of each page (the bytes stay
 * what they are). A unit (the sections: 0; chunk j: rows [(j - 1) g, j g))
 * is either a toucher's or the copy's (st[], under mu): the copy of a unit
 * waits for a touch of it in flight and takes every unit no toucher has
 * reached. */
enum { TU_FREE, TU_BUSY, TU_DONE };

typedef struct rd_touch {
	cache *c;
	uint64_t nk; /* chunks next..nk */
	uint8_t *st; /* [nk + 1] */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint64_t next; /* the lowest chunk that may be free */
	int stop;
} rd_touch;

static void touch_range(uint8_t *a, uint64_t n)
{
	const uint64_t pg = 4096;
	/* the range's own bytes only: a page it shares with a neighbour's
	 * bytes is touched at its first byte */
	for (uint8_t *q = a, *e = a + n; q < e;
	     q = (uint8_t *)(((uintptr_t)q + pg) & ~(pg - 1)))
		__atomic_fetch_add(q, 0, __ATOMIC_RELAXED);
}

static void touch_unit(cache *c, uint64_t j)
{
	const cache_layout *l = c->lay;
	if (j == 0) {
		for (uint32_t i = 0; i < l->n_sections; i++)
			touch_range(cache_dev_at(c, c->sec_off[i]),
				    l->sec[i].bytes);
		return;
	}
	uint64_t W = l->window, g = c->disk->grid, r0 = (j - 1) * g;
	for (uint32_t i = 0; i < l->n_views; i++) {
		const cache_vgeom *v = &c->vg[i];
		uint8_t *live = cache_dev_at(c, c->view_off[i]);
		for (uint64_t o = 0; o < v->outer; o++)
			touch_range(live + (o * W + r0) * v->inner,
				    g * v->inner);
	}
}

static void *toucher(void *arg)
{
	rd_touch *t = arg;
	pthread_mutex_lock(&t->mu);
	while (!t->stop) {
		uint64_t j = 0;
		if (t->st[0] != TU_FREE) {
			while (t->next <= t->nk && t->st[t->next] != TU_FREE)
				t->next++;
			if (t->next > t->nk)
				break;
			j = t->next++;
		}
		t->st[j] = TU_BUSY;
		pthread_mutex_unlock(&t->mu);
		touch_unit(t->c, j);
		pthread_mutex_lock(&t->mu);
		t->st[j] = TU_DONE;
		pthread_cond_broadcast(&t->cv);
	}
	pthread_mutex_unlock(&t->mu);
	return NULL;
}

/* Unit j is the copy's from now on. */
static void touch_take(rd_touch *t, uint64_t j)
{
	pthread_mutex_lock(&t->mu);
	while (t->st[j] == TU_BUSY)
		pthread_cond_wait(&t->cv, &t->mu);
	t->st[j] = TU_DONE;
	pthread_mutex_unlock(&t->mu);
}

/* The adopter: the live sections (the restore's state, just copied in)
 * into the reserved anchor block, on a host-mapped arena. */
typedef struct rd_adopt {
	cache *c;
	uint64_t off;
	int have; /* a block reserved */
	int rc;
	int th_on;
	pthread_t th;
} rd_adopt;

/* Its own copies, a section at a time in cache_secs_out's layout, and
 * not cache_secs_out: that gathers into the cache's batch (c->xq, one
 * thread's), which the daemon's thread fills with the chunks' rows
 * meanwhile. Only on the memcpy mover, whose copy any thread may call. */
static void *adopter(void *arg)
{
	rd_adopt *a = arg;
	cache *c = a->c;
	char *dst = cache_dev_at(c, a->off);
	uint64_t o = 0;
	a->rc = 0;
	for (uint32_t i = 0; i < c->lay->n_sections && !a->rc; i++) {
		uint64_t n = c->lay->sec[i].bytes;
		a->rc = c->mv->copy(c->mv->ctx, dst + o,
				    cache_dev_at(c, c->sec_off[i]), n);
		o += n;
	}
	return NULL;
}

/* The staging buffers of a restore: blocks of the host arena where the
 * mover copies asynchronously (the CUDA mover, which registered it: its
 * copies from there are DMA), hoff[b] != UINT64_MAX, 4 KiB aligned
 * inside them (O_DIRECT; the arena aligns to 64 bytes); else the private
 * map. 1: the host arena's, 0: private, or a negative code. */
static int stage_pick(cache *c, uint8_t *buf[DK_RBUF], uint64_t hoff[DK_RBUF])
{
	struct cache_disk_tier *d = c->disk;
	int host = c->mv != &arena_mover_memcpy;
	for (uint32_t b = 0; b < DK_RBUF; b++) {
		uint64_t n = b ? d->chunk_file : d->rbuf0_bytes;
		hoff[b] = UINT64_MAX;
		if (host && arena_alloc(c->host, n + DK_LINE, &hoff[b])) {
			hoff[b] = UINT64_MAX;
			host = 0;
		}
	}
	if (host) {
		for (uint32_t b = 0; b < DK_RBUF; b++) {
			uintptr_t p = (uintptr_t)cache_host_at(c, hoff[b]);
			buf[b] = (uint8_t *)((p + DK_LINE - 1) &
					     ~(uintptr_t)(DK_LINE - 1));
		}
		return 1;
	}
	for (uint32_t b = 0; b < DK_RBUF; b++)
		if (hoff[b] != UINT64_MAX) {
			arena_release(c->host, hoff[b]);
			hoff[b] = UINT64_MAX;
		}
	if (!d->rmap && rmap_make(d, 0))
		return MOOR_ENOSPACE;
	buf[0] = d->rmap;
	for (uint32_t b = 1; b < DK_RBUF; b++)
		buf[b] = d->rmap + d->rbuf0_bytes + (b - 1) * d->chunk_file;
	return 0;
}

static int restore_files(cache *c, const int32_t *ids, uint64_t k, uint64_t s,
			 uint64_t limit, uint64_t *bytes, char *bad)
{
	struct cache_disk_tier *d = c->disk;
	uint64_t g = d->grid, j0 = cache_min64(k, s) / g + 1, nk = s / g;
	uint32_t n = (uint32_t)(nk + 1 - j0) + 1; /* anchor, chunks j0..nk */
	rd_pipe p = {.d = d, .n = n};
	rd_touch t = {.c = c, .nk = nk, .next = j0};
	rd_adopt a = {.c = c};
	uint64_t hoff[DK_RBUF];
	p.name = malloc(n * sizeof *p.name);
	p.bytes = malloc(n * sizeof *p.bytes);
	p.p0 = malloc((n + 1) * sizeof *p.p0);
	p.left = malloc(n * sizeof *p.left);
	p.rc = calloc(n, sizeof *p.rc);
	t.st = calloc(nk + 1, 1);
	int host = 0, rc = 0;
	if (!p.name || !p.bytes || !p.p0 || !p.left || !p.rc || !t.st)
		rc = -ENOMEM;
	if (!rc && (host = stage_pick(c, p.buf, hoff)) < 0)
		rc = host;
	if (rc) {
		free(p.name);
		free(p.bytes);
		free(p.p0);
		free(p.left);
		free(p.rc);
		free(t.st);
		return rc;
	}
	name_of(p.name[0], sizeof p.name[0], DK_ANCHOR, c->ph[s], s);
	p.bytes[0] = hdr_bytes(d->n_sec, nk) + up4k(d->sec_bytes);
	for (uint32_t i = 1; i < n; i++) {
		uint64_t b = (j0 + i - 1) * g;
		name_of(p.name[i], sizeof p.name[i], DK_CHUNK, c->ph[b], b);
		p.bytes[i] = d->chunk_file;
	}
	p.p0[0] = 0;
	for (uint32_t i = 0; i < n; i++) {
		uint64_t np = (p.bytes[i] + DK_PIECE - 1) / DK_PIECE;
		p.p0[i + 1] = p.p0[i] + np;
		p.left[i] = (uint32_t)np;
	}
	for (uint64_t j = 1; j < j0; j++)
		t.st[j] = TU_DONE; /* rows in place: nobody's */
	pthread_mutex_init(&p.mu, NULL);
	pthread_cond_init(&p.cv, NULL);
	pthread_mutex_init(&t.mu, NULL);
	pthread_cond_init(&t.cv, NULL);

	pthread_t rth[DK_READERS], tth[2];
	uint32_t nr = 0, nt = 0;
	while (nr < DK_READERS &&
	       pthread_create(&rth[nr], NULL, reader, &p) == 0)
		nr++;
	/* the touchers: one, two where the cores allow it (the daemon's
	 * thread and the adopter copy meanwhile) */
	uint32_t want_t = c->mv != &arena_mover_memcpy	       ? 0
			  : sysconf(_SC_NPROCESSORS_ONLN) >= 6 ? 2
							       : 1;
	while (nt < want_t && pthread_create(&tth[nt], NULL, toucher, &t) == 0)
		nt++;

	double t_wait = 0, t_check = 0, t_copy = 0;
	uint32_t i = 0;
	for (; i < n && !rc; i++) {
		uint8_t *buf = p.buf[i % DK_RBUF];
		uint64_t b = (j0 + i - 1) * g, secs = 0;
		double t0 = moor_now();
		if (nr) {
			pthread_mutex_lock(&p.mu);
			while (p.left[i])
				pthread_cond_wait(&p.cv, &p.mu);
			rc = p.rc[i];
			pthread_mutex_unlock(&p.mu);
		} else { /* no reader thread: the reads here, in turn */
			for (uint64_t q = p.p0[i]; !rc && q < p.p0[i + 1]; q++)
				rc =
				    piece_read(d->dfd, p.name[i], buf,
					       (q - p.p0[i]) * DK_PIECE,
					       piece_len(&p, i, q), p.bytes[i]);
		}
		double t1 = moor_now();
		if (!rc)
			rc = i == 0 ? anchor_check(c, s, buf, &secs)
				    : chunk_check(c, ids, b, buf);
		double t2 = moor_now();
		if (!rc && i == 0) {
			if (nt)
				touch_take(&t, 0);
			rc = cache_secs_in(c, buf + secs);
			/* its resident anchor: reserved now, placed after
			 * the chunks */
			if (!rc &&
			    cache_anchor_reserve(c, s, limit, &a.off) == 0) {
				a.have = 1;
				if (c->mv == &arena_mover_memcpy)
					a.th_on =
					    pthread_create(&a.th, NULL, adopter,
							   &a) == 0;
				if (!a.th_on)
					a.rc = cache_secs_out(
					    c, cache_dev_at(c, a.off));
			}
		} else if (!rc) {
			if (nt)
				touch_take(&t, j0 + i - 1);
			rc = chunk_copy(c, b, buf);
		}
		/* the buffer goes back to the readers once the mover has
		 * read it (a DMA from pinned staging is asynchronous) */
		if (!rc)
			rc = cache_sync(c);
		t_wait += t1 - t0;
		t_check += t2 - t1;
		t_copy += moor_now() - t2;
		if (rc) {
			snprintf(bad, 48, "%s", p.name[i]);
			break;
		}
		*bytes += p.bytes[i];
		pthread_mutex_lock(&p.mu);
		p.applied = i + 1;
		pthread_cond_broadcast(&p.cv);
		pthread_mutex_unlock(&p.mu);
	}
	/* every helper home: the readers (no read starts after stop) before
	 * the buffers go, the touchers, the adopter */
	pthread_mutex_lock(&p.mu);
	p.stop = 1;
	pthread_cond_broadcast(&p.cv);
	pthread_mutex_unlock(&p.mu);
	for (uint32_t r = 0; r < nr; r++)
		pthread_join(rth[r], NULL);
	pthread_mutex_lock(&t.mu);
	t.stop = 1;
	pthread_mutex_unlock(&t.mu);
	for (uint32_t r = 0; r < nt; r++)
		pthread_join(tth[r], NULL);
	/* after a failure, the mover done with the staging and the anchor
	 * block before they go */
	if (rc)
		(void)cache_sync(c);
	double t3 = moor_now();
	if (a.th_on)
		pthread_join(a.th, NULL);
	if (a.have) {
		/* the anchor goes as before: a failed copy of it costs the
		 * anchor, never the restore */
		if (!rc && !a.rc)
			(void)cache_anchor_place(c, s, a.off);
		else
			arena_release(c->dev, a.off);
	}
	double t4 = moor_now();
	if (host)
		for (uint32_t b = 0; b < DK_RBUF; b++)
			arena_release(c->host, hoff[b]);
	pthread_mutex_destroy(&p.mu);
	pthread_cond_destroy(&p.cv);
	pthread_mutex_destroy(&t.mu);
	pthread_cond_destroy(&t.cv);
	pthread_mutex_lock(&d->mu);
	d->last.read_ms = p.t1 > p.t0 ? (p.t1 - p.t0) * 1e3 : 0;
	d->last.wait_ms = t_wait * 1e3;
	d->last.check_ms = t_check * 1e3;
	d->last.copy_ms = t_copy * 1e3;
	d->last.adopt_ms = (t4 - t3) * 1e3;
	d->last.host = host;
	pthread_mutex_unlock(&d->mu);
	if (!rc)
		touch(d, p.name[0]);
	free(p.name);
	free(p.bytes);
	free(p.p0);
	free(p.left);
	free(p.rc);
	free(t.st);
	return rc;
}

/* Reads the chunks above k and the anchor at s into the live buffers,
 * every id and checksum checked first; the anchor becomes a resident
 * anchor. A failure deletes the file (MOOR_EFORMAT, ETRUNC, -errno). */
static int disk_restore(cache *c, const int32_t *ids, uint64_t k, uint64_t s,
			uint64_t limit)
{
	struct cache_disk_tier *d = c->disk;
	if (!on(c))
		return MOOR_ERANGE;
	pthread_mutex_lock(&d->mu);
	d->reading = 1;
	pthread_mutex_unlock(&d->mu);
	double t0 = moor_now();
	uint64_t bytes = 0;
	char bad[48] = "";
	int rc = restore_files(c, ids, k, s, limit, &bytes, bad);
	double dt = moor_now() - t0;
	if (rc) {
		moor_warn("[disk] %s failed its checks (%s): deleted; the "
			  "prompt prefills cold",
			  bad, moor_strerror(rc));
		file_drop1(d, bad);
		char an[48];
		name_of(an, sizeof an, DK_ANCHOR, c->ph[s], s);
		file_drop1(d, an);
	}
	pthread_mutex_lock(&d->mu);
	d->reading = 0;
	if (rc) {
		d->k.hit_failed++;
	} else {
		d->k.hits++;
		d->k.tokens_read += s - cache_min64(k, s) / d->grid * d->grid;
		d->k.bytes_read += bytes;
		d->last_restore_ms = dt * 1e3;
		if (dt > 0 && bytes >= (1u << 20))
			d->read_bps = (double)bytes / dt;
	}
	pthread_cond_broadcast(&d->done);
	pthread_mutex_unlock(&d->mu);
	if (!rc)
		moor_info("[disk] restored %llu tokens (%.1f MB) in %.1f ms "
			  "(%.2f GB/s; reads %.1f ms, waited %.1f, checks "
			  "%.1f, copies %.1f, anchor %.1f; %s staging)",
			  (unsigned long long)s, (double)bytes / 1e6, dt * 1e3,
			  dt > 0 ? (double)bytes / dt / 1e9 : 0.0,
			  d->last.read_ms, d->last.wait_ms, d->last.check_ms,
			  d->last.copy_ms, d->last.adopt_ms,
			  d->last.host ? "host arena" : "private");
	return rc;
}

static uint64_t disk_restore_bytes(cache *c, uint64_t k, uint64_t s)
{
	struct cache_disk_tier *d = c->disk;
	if (!on(c))
		return 0;
	uint64_t g = d->grid;
	return (s / g - cache_min64(k, s) / g) * g * c->row_bytes +
	       c->sec_bytes;
}

/* ---- clear, stats ---- */

static int disk_clear(cache *c)
{
	struct cache_disk_tier *d = c->disk;
	if (!d)
		return 0;
	drain_queue(d, 0);
	dk_item *it;
	uint32_t n;
	uint64_t total;
	int rc = items_load(d, &it, &n, &total);
	if (rc)
		return rc;
	MDB_txn *tx;
	rc = lmdb_rc(mdb_txn_begin(d->env, NULL, 0, &tx));
	if (!rc) {
		for (uint32_t i = 0; i < n; i++)
			file_drop(d, tx, it[i].name);
		/* the clear drops the traffic too */
		(void)mdb_drop(tx, d->cnt, 0);
		(void)mdb_drop(tx, d->sess, 0);
		rc = lmdb_rc(mdb_txn_commit(tx));
	}
	items_free(it, n);
	return rc;
}

/* With a cfg.spill_dir, cfg.disk_on and an index that opened (else
 * c->disk is NULL). */
static int disk_tier_on(const cache *c)
{
	return c->disk != NULL;
}

static json_t *disk_stats_json(cache *c)
{
	json_t *o = json_object();
	struct cache_disk_tier *d = c->disk;
	json_object_set_new(o, "on", json_boolean(disk_tier_on(c)));
	if (!d)
		return o;
	dk_item *it = NULL;
	uint32_t n = 0, na = 0, nc = 0;
	uint64_t total = 0;
	if (!items_load(d, &it, &n, &total))
		for (uint32_t i = 0; i < n; i++) {
			na += it[i].r.kind == DK_ANCHOR;
			nc += it[i].r.kind == DK_CHUNK;
		}
	json_t *lines = json_array();
	for (uint32_t i = 0; i < n; i++)
		if (it[i].r.kind == DK_ANCHOR)
			json_array_append_new(
			    lines, json_integer((json_int_t)it[i].r.line));
	items_free(it, n);
	uint64_t fr = free_bytes(d);
#define SETI(k, v) json_object_set_new(o, k, json_integer((json_int_t)(v)))
	SETI("anchors", na);
	SETI("chunks", nc);
	SETI("bytes", total);
	SETI("budget", c->cfg.disk_bytes);
	SETI("min_free", c->cfg.disk_min_free);
	SETI("free", fr == UINT64_MAX ? 0 : fr);
	json_object_set_new(
	    o, "floor_binding",
	    json_boolean(fr != UINT64_MAX && fr < c->cfg.disk_min_free));
	json_t *dw = cache_ledger_json(c), *dt = json_object_get(dw, "tier");
	SETI("written_today", dt ? json_integer_value(dt) : 0);
	json_decref(dw);
	json_object_set_new(o, "lines", lines);
	pthread_mutex_lock(&d->mu);
	uint32_t pend = 0;
	for (dk_job *j = d->q; j; j = j->next)
		pend++;
	SETI("pending", pend);
	SETI("hits", d->k.hits);
	SETI("hit_failed", d->k.hit_failed);
	SETI("tokens_read", d->k.tokens_read);
	SETI("bytes_read", d->k.bytes_read);
	SETI("bytes_written", d->k.bytes_written);
	SETI("chunks_written", d->k.chunks_written);
	SETI("chunks_kept", d->k.chunks_kept);
	SETI("anchors_written", d->k.anchors_written);
	SETI("write_failed", d->k.write_failed);
	SETI("window", d->k.window);
	SETI("busy", d->k.busy);
	SETI("evicted", d->k.evicted);
	SETI("expired", d->k.expired);
	SETI("swept", d->k.swept);
	SETI("orphans", d->k.orphans);
	SETI("index_rebuilt", d->k.rebuilt);	 /* a damaged index replaced */
	SETI("index_failed", d->k.index_failed); /* plans it could not count */
	SETI("reindexed", d->k.reindexed); /* whole files the index lacked */
	SETI("floor_binds", d->k.floor_binds);
	SETI("admitted", d->k.admitted);
	SETI("counted", d->k.counted);
	SETI("skipped_have", d->k.skipped_have);
	SETI("guard_skips", d->k.guard_skips); /* plans the write guard
						* skipped */
	SETI("files_direct", d->k.direct);     /* written with O_DIRECT */
	SETI("files_buffered", d->k.buffered); /* the fadvise fallback */
	json_object_set_new(o, "read_bps", json_real(d->read_bps));
	json_object_set_new(o, "prefill_tps", json_real(cache_prefill_rate(c)));
	json_object_set_new(o, "last_restore_ms",
			    json_real(d->last_restore_ms));
	json_object_set_new(o, "last_write_ms", json_real(d->last_write_ms));
	/* where the last restore's time went (restore_files) */
	json_object_set_new(o, "last_read_ms", json_real(d->last.read_ms));
	json_object_set_new(o, "last_wait_ms", json_real(d->last.wait_ms));
	json_object_set_new(o, "last_check_ms", json_real(d->last.check_ms));
	json_object_set_new(o, "last_copy_ms", json_real(d->last.copy_ms));
	json_object_set_new(o, "last_adopt_ms", json_real(d->last.adopt_ms));
	json_object_set_new(o, "last_staged_host", json_boolean(d->last.host));
	pthread_mutex_unlock(&d->mu);
#undef SETI
	return o;
}

/* ---- the disk tier as a tier ---- */

static int disk_tier_offer(cache *c, cache_tier_ask *q, cache_tier_offer *o)
{
	uint64_t s, k = cache_min64(q->c_res, q->t_res);
	if (q->guest || !disk_offer(c, q->r->ids, q->r->n, q->best, k, &s))
		return 0;
	memset(o, 0, sizeof *o);
	o->start = s;
	/* a cold grid prefill's rows: the chunks above the clean rows in
	 * place are read */
	o->k = o->cut = cache_min64(k, s);
	o->taint = CACHE_NO_TAINT;
	return 1;
}

static int disk_tier_restore(cache *c, const cache_tier_offer *o,
			     const int32_t *ids, uint64_t limit)
{
	return disk_restore(c, ids, o->k, o->start, limit);
}

static uint64_t disk_tier_restore_bytes(cache *c, const cache_tier_offer *o)
{
	return disk_restore_bytes(c, o->k, o->start);
}

static double disk_read_bps(cache *c)
{
	struct cache_disk_tier *d = c->disk;
	if (!on(c))
		return 0;
	pthread_mutex_lock(&d->mu);
	double r = d->read_bps;
	pthread_mutex_unlock(&d->mu);
	return r;
}

static uint64_t disk_bytes(cache *c)
{
	dk_item *it;
	uint32_t n;
	uint64_t total;
	if (!c->disk || items_load(c->disk, &it, &n, &total))
		return 0;
	items_free(it, n);
	return total;
}

/* Its own budget on the drive (disk_bytes by value, disk_days, the
 * free-space floor): nothing for the memory policy to take. */
const cache_tier_ops cache_tier_disk = {
    .tier = CACHE_TIER_DISK,
    .level = -1,
    .flags = CACHE_TF_NVME,
    .offer = disk_tier_offer,
    .restore = disk_tier_restore,
    .restore_bytes = disk_tier_restore_bytes,
    .read_bps = disk_read_bps,
    .bytes = disk_bytes,
    .clear = disk_clear,
    .stats = disk_stats_json,
    .on = disk_tier_on,
};
