/* ledger.c: the NVMe tiers' ledger (`ledger_`): the drive writes of the
 * day and the write guard over them, and the fingerprint adoption
 * records. LMDB in DIR/ledger (kvdb.h: checked whole before it is mapped,
 * replaced when damaged), its own environment so that the spill keeps a
 * count without the disk tier and a damaged tier index costs no count:
 *   days  "YYYY-MM-DD" (the local day) -> ldg_day: the bytes the disk
 *         tier and the spill wrote that day, and the guard's skips;
 *   fpeq  new fingerprint (32 bytes) + an older one or its prefix (8 to
 *         32 bytes) -> ldg_eq: the operator declared the older one's
 *         files equal (cached --adopt-from FP) at `made`.
 *
 * The write guard (the seed's WriteGuard). The tier and the spill add
 * every byte they write to the day's count. Against the day budget B
 * (--disk-write-budget-gb, 200 GB of 10^9 bytes; 0: no budget):
 *   ok    under B: everything is written;
 *   over  B to 1.5 B: the disk tier plans nothing; the spill writes a
 *         planned stop's drain and evictions of conversations of at least
 *         guard_evict_tokens (32,768);
 *   hard  1.5 B and more: only the drain.
 * A skip is a cache not written, never an answer changed: it is counted
 * (today's record, kept across restarts), and the first skip of each level
 * in a day of this process logs one "[disk-guard] skip" line (the rest are
 * counted only).
 * The drain is never skipped: a planned restart resumes where it stopped.
 *
 * Fingerprints. The files hold the fingerprint of the engine whose rows
 * they are; a file of another one is swept at the attach, unless an
 * adoption record says its fingerprint equals the attached one (directly
 * or through a chain of records: A adopted by B, B by C). The set of
 * fingerprints equal to the attached one is computed at the attach
 * (cache_ledger_attach) and read by both tiers (cache_ledger_fp_ok).
 *
 * Threads: the disk tier's writer calls cache_ledger_wrote; everything else
 * runs on cached's thread. `mu` guards the day's record; LMDB serializes the
 * write transactions.
 */
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cache_int.h"
#include "kvdb.h"
#include "moor.h"
#include "util.h"

#define LDG_VERSION 1u
#define LDG_DAYS_KEPT 60
#define LDG_DAYS_SHOWN 14
#define LDG_EQ_MAX 64

typedef struct ldg_day {
	uint32_t version, pad0;
	uint64_t tier, spill;		 /* bytes written */
	uint64_t skips_over, skips_hard; /* the guard's skips by level */
} ldg_day;
_Static_assert(sizeof(ldg_day) == 40, "ldg_day is 40 bytes");

typedef struct ldg_eq {
	uint32_t version, old_len;
	uint64_t made; /* unix seconds */
} ldg_eq;
_Static_assert(sizeof(ldg_eq) == 16, "ldg_eq is 16 bytes");

typedef struct fp_pre {
	uint8_t b[32];
	uint32_t n; /* the bytes that count: 8 to 32 */
} fp_pre;

struct cache_ledger {
	MDB_env *env; /* NULL: the counts live in memory only */
	MDB_dbi days, fpeq;
	pthread_mutex_t mu;
	char today[16];
	ldg_day d;
	int said[3];	       /* a skip of this level was logged today */
	fp_pre eq[LDG_EQ_MAX]; /* equal to the attached fingerprint */
	uint32_t n_eq;
	int adopt_ok; /* cfg.adopt_from parsed */
	fp_pre adopt;
	int rebuilt; /* the index was damaged and replaced at the open */
};

time_t (*cache_ledger_clock)(void);

static time_t now_t(void)
{
	return cache_ledger_clock ? cache_ledger_clock() : time(NULL);
}

static void day_key(char b[16])
{
	time_t t = now_t();
	struct tm tm;
	localtime_r(&t, &tm);
	strftime(b, 16, "%Y-%m-%d", &tm);
}

int cache_fp_parse(const char *s, uint8_t out[32], uint32_t *n)
{
	size_t l = strlen(s);
	if (l < 16 || l > 64 || l % 2)
		return MOOR_ERANGE;
	memset(out, 0, 32);
	if (moor_unhex(s, l / 2, out))
		return MOOR_ERANGE;
	*n = (uint32_t)(l / 2);
	return 0;
}

static int pre_match(const fp_pre *a, const uint8_t *b, uint32_t bn)
{
	uint32_t n = a->n < bn ? a->n : bn;
	return n >= 8 && !memcmp(a->b, b, n);
}

/* ---- the day's record ---- */

static void day_load(struct cache_ledger *L)
{
	memset(&L->d, 0, sizeof L->d);
	L->d.version = LDG_VERSION;
	memset(L->said, 0, sizeof L->said);
	if (!L->env)
		return;
	MDB_txn *tx;
	if (mdb_txn_begin(L->env, NULL, MDB_RDONLY, &tx))
		return;
	MDB_val k = {strlen(L->today), L->today}, v;
	if (!mdb_get(tx, L->days, &k, &v) && v.mv_size == sizeof(ldg_day)) {
		ldg_day x;
		memcpy(&x, v.mv_data, sizeof x);
		if (x.version == LDG_VERSION)
			L->d = x;
	}
	mdb_txn_abort(tx);
}

/* Under mu: today's record is the local day's. */
static void day_roll(struct cache_ledger *L)
{
	char k[16];
	day_key(k);
	if (strcmp(k, L->today)) {
		memcpy(L->today, k, sizeof k);
		day_load(L);
	}
}

/* Under mu: today's record to LMDB (a failure keeps the count in memory;
 * it is written again with the next one). */
static void day_store(struct cache_ledger *L)
{
	if (!L->env)
		return;
	MDB_txn *tx;
	if (mdb_txn_begin(L->env, NULL, 0, &tx))
		return;
	MDB_val k = {strlen(L->today), L->today}, v = {sizeof L->d, &L->d};
	if (mdb_put(tx, L->days, &k, &v, 0))
		mdb_txn_abort(tx);
	else
		(void)mdb_txn_commit(tx);
}

static void days_prune(struct cache_ledger *L)
{
	MDB_txn *tx;
	if (mdb_txn_begin(L->env, NULL, 0, &tx))
		return;
	MDB_stat st;
	MDB_cursor *cu;
	if (mdb_stat(tx, L->days, &st) || st.ms_entries <= LDG_DAYS_KEPT ||
	    mdb_cursor_open(tx, L->days, &cu)) {
		mdb_txn_abort(tx);
		return;
	}
	size_t drop = st.ms_entries - LDG_DAYS_KEPT;
	MDB_val k, v;
	/* the keys sort as the days do */
	while (drop-- && !mdb_cursor_get(cu, &k, &v, MDB_FIRST))
		(void)mdb_cursor_del(cu, 0);
	mdb_cursor_close(cu);
	(void)mdb_txn_commit(tx);
}

/* ---- lifecycle ---- */

int cache_ledger_open(cache *c, char *err)
{
	c->ledger = NULL;
	if (!c->cfg.spill_dir[0])
		return 0;
	struct cache_ledger *L = calloc(1, sizeof *L);
	if (!L)
		return -ENOMEM;
	pthread_mutex_init(&L->mu, NULL);
	if (c->cfg.adopt_from[0]) {
		if (cache_fp_parse(c->cfg.adopt_from, L->adopt.b,
				   &L->adopt.n)) {
			moor_errf(err,
				  "--adopt-from %s: expected 16 to 64 hex "
				  "digits of a fingerprint",
				  c->cfg.adopt_from);
			pthread_mutex_destroy(&L->mu);
			free(L);
			return MOOR_ERANGE;
		}
		L->adopt_ok = 1;
	}
	char path[400], why[MOOR_ERRLEN] = "";
	snprintf(path, sizeof path, "%s/ledger", c->cfg.spill_dir);
	int rc =
	    mkdir(c->cfg.spill_dir, 0700) < 0 && errno != EEXIST ? -errno : 0;
	if (!rc && mkdir(path, 0700) < 0 && errno != EEXIST)
		rc = -errno;
	if (!rc)
		rc = kvdb_open(path, 16ull << 20, 4, &L->env, &L->rebuilt, why);
	MDB_txn *tx = NULL;
	if (!rc)
		rc = kvdb_rc(mdb_txn_begin(L->env, NULL, 0, &tx));
	if (!rc)
		rc = kvdb_rc(mdb_dbi_open(tx, "days", MDB_CREATE, &L->days));
	if (!rc)
		rc = kvdb_rc(mdb_dbi_open(tx, "fpeq", MDB_CREATE, &L->fpeq));
	if (!rc) {
		rc = kvdb_rc(mdb_txn_commit(tx));
		tx = NULL;
	}
	if (tx)
		mdb_txn_abort(tx);
	if (rc) {
		/* the guard still counts, in memory: a tier that cannot keep
		 * its count must not stop writing what serves requests */
		moor_warn("[disk-guard] the ledger %s cannot be opened (%s): "
			  "the day's writes are counted in memory only, and no "
			  "adoption record is read",
			  path, why[0] ? why : moor_strerror(rc));
		if (L->env)
			mdb_env_close(L->env);
		L->env = NULL;
	} else if (L->rebuilt) {
		moor_warn("[disk-guard] the ledger was damaged (%s): moved "
			  "aside as data.mdb.bad and started empty (today's "
			  "write count and the adoption records are lost)",
			  why);
	}
	if (L->env)
		days_prune(L);
	day_key(L->today);
	day_load(L);
	c->ledger = L;
	return 0;
}

void cache_ledger_close(cache *c)
{
	struct cache_ledger *L = c->ledger;
	if (!L)
		return;
	if (L->env)
		mdb_env_close(L->env);
	pthread_mutex_destroy(&L->mu);
	free(L);
	c->ledger = NULL;
}

/* ---- the guard ---- */

static uint64_t budget(const cache *c)
{
	return c->cfg.write_budget;
}

static int level_of(const cache *c, uint64_t written)
{
	uint64_t b = budget(c);
	if (!b || written < b)
		return CACHE_LEDGER_OK;
	return written < b + b / 2 ? CACHE_LEDGER_OVER : CACHE_LEDGER_HARD;
}

static const char *level_name(int lv)
{
	return lv == CACHE_LEDGER_HARD	 ? "hard"
	       : lv == CACHE_LEDGER_OVER ? "over"
					 : "ok";
}

void cache_ledger_wrote(cache *c, int who, uint64_t bytes)
{
	struct cache_ledger *L = c->ledger;
	if (!L || !bytes)
		return;
	pthread_mutex_lock(&L->mu);
	day_roll(L);
	if (who == CACHE_LEDGER_SPILL)
		L->d.spill += bytes;
	else
		L->d.tier += bytes;
	day_store(L);
	pthread_mutex_unlock(&L->mu);
}

int cache_ledger_allow(cache *c, int what, uint64_t tokens)
{
	struct cache_ledger *L = c->ledger;
	if (!L || what == CACHE_LEDGER_SPILL_DRAIN)
		return 1;
	pthread_mutex_lock(&L->mu);
	day_roll(L);
	uint64_t w = L->d.tier + L->d.spill;
	int lv = level_of(c, w);
	int ok = lv == CACHE_LEDGER_OK ||
		 (lv == CACHE_LEDGER_OVER && what == CACHE_LEDGER_SPILL_EVICT &&
		  tokens >= c->cfg.guard_evict_tokens);
	if (!ok) {
		if (lv == CACHE_LEDGER_OVER)
			L->d.skips_over++;
		else
			L->d.skips_hard++;
		day_store(L);
		if (!L->said[lv]) {
			L->said[lv] = 1;
			const double M = 1e6;
			moor_warn(
			    "[disk-guard] skip %s of %llu tokens: %.1f MB "
			    "written today (tier %.1f, spill %.1f), budget "
			    "%.1f MB, level %s (%s); later skips at this level "
			    "today are counted, not logged",
			    what == CACHE_LEDGER_TIER_PLAN
				? "the disk tier's anchors"
				: "the spill's eviction",
			    (unsigned long long)tokens, (double)w / M,
			    (double)L->d.tier / M, (double)L->d.spill / M,
			    (double)budget(c) / M, level_name(lv),
			    lv == CACHE_LEDGER_OVER
				? "past the budget: the disk tier writes "
				  "nothing, the spill only the drain and "
				  "evictions of long conversations"
				: "past 1.5 times the budget: only the drain");
		}
	}
	pthread_mutex_unlock(&L->mu);
	return ok;
}

/* ---- fingerprints ---- */

void cache_ledger_attach(cache *c, const uint8_t fp[32])
{
	struct cache_ledger *L = c->ledger;
	if (!L)
		return;
	char fh[65];
	moor_hex(fp, 32, fh);
	L->n_eq = 1;
	memcpy(L->eq[0].b, fp, 32);
	L->eq[0].n = 32;
	if (!L->env) {
		/* no ledger: the flag holds for this run only */
		if (L->adopt_ok && !pre_match(&L->adopt, fp, 32))
			L->eq[L->n_eq++] = L->adopt;
		moor_info("[fp] engine fingerprint %s%s", fh,
			  L->n_eq > 1 ? " (--adopt-from for this run only: no "
					"ledger to record it in)"
				      : "");
		return;
	}
	if (L->adopt_ok) {
		char ah[65];
		moor_hex(L->adopt.b, L->adopt.n, ah);
		if (pre_match(&L->adopt, fp, 32)) {
			moor_info("[fp] --adopt-from %s is the attached "
				  "engine's own fingerprint: nothing to adopt",
				  ah);
		} else {
			uint8_t kb[64];
			memcpy(kb, fp, 32);
			memcpy(kb + 32, L->adopt.b, L->adopt.n);
			MDB_val k = {32 + L->adopt.n, kb}, v;
			ldg_eq e = {LDG_VERSION, L->adopt.n, (uint64_t)now_t()};
			MDB_txn *tx;
			int rc = kvdb_rc(mdb_txn_begin(L->env, NULL, 0, &tx));
			int had = 0;
			if (!rc) {
				had = mdb_get(tx, L->fpeq, &k, &v) == 0;
				v.mv_size = sizeof e;
				v.mv_data = &e;
				if (!had)
					rc = kvdb_rc(
					    mdb_put(tx, L->fpeq, &k, &v, 0));
				if (rc)
					mdb_txn_abort(tx);
				else
					rc = kvdb_rc(mdb_txn_commit(tx));
			}
			if (rc)
				moor_warn("[fp] --adopt-from %s: the record "
					  "cannot be written (%s): adopted "
					  "for this run only",
					  ah, moor_strerror(rc));
			else if (!had)
				moor_info("[fp] adopted: the files of "
					  "fingerprint %s are read as those "
					  "of %s from now on (--adopt-from, "
					  "recorded in the ledger)",
					  ah, fh);
			if (rc && L->n_eq < LDG_EQ_MAX)
				L->eq[L->n_eq++] = L->adopt;
		}
	}
	/* the closure of the records over the attached fingerprint */
	MDB_txn *tx;
	if (mdb_txn_begin(L->env, NULL, MDB_RDONLY, &tx))
		return;
	for (int grew = 1; grew && L->n_eq < LDG_EQ_MAX;) {
		grew = 0;
		MDB_cursor *cu;
		if (mdb_cursor_open(tx, L->fpeq, &cu))
			break;
		MDB_val k, v;
		int op = MDB_FIRST;
		while (!mdb_cursor_get(cu, &k, &v, op) &&
		       L->n_eq < LDG_EQ_MAX) {
			op = MDB_NEXT;
			if (k.mv_size < 40 || k.mv_size > 64 ||
			    v.mv_size != sizeof(ldg_eq))
				continue;
			const uint8_t *nb = k.mv_data;
			fp_pre old = {.n = (uint32_t)k.mv_size - 32};
			memcpy(old.b, nb + 32, old.n);
			int from = 0, have = 0;
			for (uint32_t i = 0; i < L->n_eq; i++) {
				from |= pre_match(&L->eq[i], nb, 32);
				have |= L->eq[i].n == old.n &&
					!memcmp(L->eq[i].b, old.b, old.n);
			}
			if (from && !have) {
				L->eq[L->n_eq++] = old;
				grew = 1;
			}
		}
		mdb_cursor_close(cu);
	}
	mdb_txn_abort(tx);
	moor_info("[fp] engine fingerprint %s%s", fh,
		  L->n_eq > 1 ? " (with the files of the fingerprints "
				"adopted as equal to it)"
			      : "");
	for (uint32_t i = 1; i < L->n_eq; i++) {
		char oh[65];
		moor_hex(L->eq[i].b, L->eq[i].n, oh);
		moor_info("[fp]   equal by an adoption record: %s", oh);
	}
}

int cache_ledger_fp_ok(const cache *c, const uint8_t fp[32])
{
	if (!memcmp(fp, c->lay->fingerprint, 32))
		return 1;
	const struct cache_ledger *L = c->ledger;
	if (!L)
		return 0;
	for (uint32_t i = 1; i < L->n_eq; i++)
		if (pre_match(&L->eq[i], fp, 32))
			return 1;
	return 0;
}

/* ---- stats ---- */

static json_t *day_json(const char *day, const ldg_day *d)
{
	return json_pack("{s:s, s:I, s:I, s:I, s:I}", "day", day, "bytes",
			 (json_int_t)(d->tier + d->spill), "tier",
			 (json_int_t)d->tier, "spill", (json_int_t)d->spill,
			 "skips", (json_int_t)(d->skips_over + d->skips_hard));
}

json_t *cache_ledger_json(cache *c)
{
	struct cache_ledger *L = c->ledger;
	json_t *o = json_object();
	json_object_set_new(o, "on", json_boolean(L != NULL));
	if (!L)
		return o;
	pthread_mutex_lock(&L->mu);
	day_roll(L);
	ldg_day d = L->d;
	char today[16];
	memcpy(today, L->today, sizeof today);
	pthread_mutex_unlock(&L->mu);
	uint64_t w = d.tier + d.spill;
	json_object_set_new(o, "day", json_string(today));
	CACHE_SETI(o, "bytes", w);
	CACHE_SETI(o, "tier", d.tier);
	CACHE_SETI(o, "spill", d.spill);
	json_object_set_new(o, "gb", json_real((double)w / 1e9));
	CACHE_SETI(o, "budget", budget(c));
	json_object_set_new(o, "level",
			    json_string(level_name(level_of(c, w))));
	CACHE_SETI(o, "skips", d.skips_over + d.skips_hard);
	CACHE_SETI(o, "skips_over", d.skips_over);
	CACHE_SETI(o, "skips_hard", d.skips_hard);
	json_object_set_new(o, "kept", json_boolean(L->env != NULL));
	json_t *days = json_array();
	MDB_txn *tx;
	if (L->env && !mdb_txn_begin(L->env, NULL, MDB_RDONLY, &tx)) {
		MDB_cursor *cu;
		if (!mdb_cursor_open(tx, L->days, &cu)) {
			MDB_val k, v;
			int op = MDB_LAST, n = 0;
			while (n < LDG_DAYS_SHOWN &&
			       !mdb_cursor_get(cu, &k, &v, op)) {
				op = MDB_PREV;
				ldg_day x;
				char day[16];
				if (v.mv_size != sizeof x || k.mv_size >= 16)
					continue;
				memcpy(&x, v.mv_data, sizeof x);
				memcpy(day, k.mv_data, k.mv_size);
				day[k.mv_size] = 0;
				if (!strcmp(day, today))
					x = d; /* the count in hand */
				json_array_append_new(days, day_json(day, &x));
				n++;
			}
			mdb_cursor_close(cu);
		}
		mdb_txn_abort(tx);
	}
	json_object_set_new(o, "days", days);
	/* the fingerprints whose files the attached engine reads besides its
	 * own (adoption records) */
	json_t *eq = json_array();
	for (uint32_t i = 1; i < L->n_eq; i++) {
		char h[65];
		moor_hex(L->eq[i].b, L->eq[i].n, h);
		json_array_append_new(eq, json_string(h));
	}
	json_object_set_new(o, "fp_equal", eq);
	return o;
}
