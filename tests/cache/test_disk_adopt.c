/* test_disk_adopt: an adoption record (cached --adopt-from FP) makes the
 * NVMe tiers' files of an older fingerprint the attached engine's, on the
 * made-up architecture of toy.h:
 *   - fingerprint 07..: A (1,200 tokens, a session's first long request)
 *     writes its head to the disk tier and the drain writes A to the
 *     spill;
 *   - fingerprint 08.. with --adopt-from 07.. (all 64 digits): nothing is
 *     swept, the drained A is read back into the live buffers, and the
 *     stats list 07.. as equal;
 *   - 08.. again without the flag: the record is kept (the ledger): Q,
 *     which shares 1,150 tokens with A, resumes from the disk tier at
 *     1,120 and equals a cold run;
 *   - 09.. without a record: every file is swept, Q is cold (and writes
 *     its head under 09..: anchors up to 1,248);
 *   - 0a.. adopting 09.. by a 16-digit prefix, then 0b.. adopting 0a..:
 *     both read 09..'s files (a chain of records), bit for bit;
 *   - a bad --adopt-from is refused with a clear error. */
#include <fcntl.h>
#include <jansson.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dfile.h"
#include "moor.h"
#include "toy.h"

#define G 32
#define NA 1200

static char dir[256];

static void cfg_of(cache_cfg *cfg, const char *name, const char *adopt)
{
	toy_cfg_disk(cfg, "dad", name, dir);
	snprintf(cfg->adopt_from, sizeof cfg->adopt_from, "%s",
		 adopt ? adopt : "");
}

/* toy_open with the fingerprint's byte fp */
static void open_fp(toy_env *e, const char *name, uint8_t fp, const char *adopt)
{
	cache_cfg cfg;
	cfg_of(&cfg, name, adopt);
	char err[MOOR_ERRLEN] = "";
	memset(e, 0, sizeof *e);
	e->lay = malloc(sizeof *e->lay);
	REQUIRE(e->lay, "oom");
	toy_layout(e->lay, 4096, G, fp);
	REQUIRE(cache_new(&cfg, &e->c, err) == 0, "cache_new: %s", err);
	REQUIRE(cache_hello(e->c, e->lay, &e->ho, err) == 0, "hello: %s", err);
	e->dev = cache_dev_base(e->c);
	toy_seq_arena(&e->s, e->dev, &e->ho);
	toy_seq_alloc(e->lay, &e->cold);
}

static json_t *stats(cache *c)
{
	char *s = cache_stats_json(c);
	json_t *r = json_loads(s, 0, NULL);
	free(s);
	REQUIRE(r, "stats");
	return r;
}

static size_t n_equal(cache *c)
{
	json_t *r = stats(c);
	size_t n = json_array_size(
	    json_object_get(json_object_get(r, "disk_writes"), "fp_equal"));
	json_decref(r);
	return n;
}

int main(void)
{
	moor_log_level = MOOR_LOG_ERROR;
	snprintf(dir, sizeof dir, "/tmp/moor-disk-adopt-XXXXXX");
	REQUIRE(mkdtemp(dir), "mkdtemp");
	int32_t *A = toy_ids(NA, 131), *B = toy_ids(100, 132);
	int32_t *Q = toy_cat(A, 1150, B, 100);
	toy_part(Q, A, 1150);
	char hex7[65], hex9[17];
	memset(hex7, '0', 64);
	for (int i = 0; i < 64; i += 2)
		hex7[i + 1] = '7';
	hex7[64] = 0;
	snprintf(hex9, sizeof hex9, "0909090909090909");

	toy_env e;
	toy_turn t;
	char err[MOOR_ERRLEN] = "";
	open_fp(&e, "a", 7, NULL);
	REQUIRE(toy_run(&e, A, NA, "s", 4, &t, 0, "A") == 0, "A");
	cache_disk_wait(e.c);
	long long anchors = toy_stat(e.c, "disk", "anchors");
	CHECK(anchors == 4, "A's head: %lld anchors", anchors);
	REQUIRE(cache_drain(e.c, err) == 0, "drain: %s", err);
	toy_close(&e);

	open_fp(&e, "b", 8, hex7);
	CHECK(toy_stat(e.c, "disk", "swept") == 0 &&
		  toy_stat(e.c, "disk", "anchors") == anchors &&
		  toy_stat(e.c, "spill", "swept") == 0,
	      "adopted: nothing swept (%lld disk files, %lld spill entries)",
	      toy_stat(e.c, "disk", "swept"), toy_stat(e.c, "spill", "swept"));
	CHECK(e.ho.resident_len == NA + 3,
	      "the drained A is read back under the new fingerprint: %llu",
	      (unsigned long long)e.ho.resident_len);
	CHECK(n_equal(e.c) == 1, "07.. listed as equal");
	toy_close(&e);

	open_fp(&e, "c", 8, NULL);
	CHECK(n_equal(e.c) == 1, "the record outlives the restart");
	/* A's spill entry would serve Q too: the disk tier's turn */
	REQUIRE(cache_clear(e.c, "spill") == 0, "clear the spill");
	REQUIRE(toy_run(&e, Q, NA + 50, "q", 3, &t, 1, "Q under 08..") == 0,
		"Q under 08.. equals a cold run");
	CHECK(t.plan.tier == CACHE_TIER_DISK && t.plan.start == 1120,
	      "Q from 07..'s files: %s at %llu", cache_tier_name(t.plan.tier),
	      (unsigned long long)t.plan.start);
	cache_disk_wait(e.c);
	toy_close(&e);

	open_fp(&e, "d", 9, NULL);
	CHECK(toy_stat(e.c, "disk", "swept") > 0 &&
		  toy_stat(e.c, "disk", "anchors") == 0 && n_equal(e.c) == 0,
	      "09.. (no record): swept %lld files",
	      toy_stat(e.c, "disk", "swept"));
	REQUIRE(toy_run(&e, Q, NA + 50, "q2", 3, &t, 1, "Q under 09..") == 0,
		"Q under 09..");
	CHECK(t.plan.start == 0, "Q cold under 09..: %llu",
	      (unsigned long long)t.plan.start);
	cache_disk_wait(e.c);
	CHECK(toy_stat(e.c, "disk", "anchors") > 0, "Q's head under 09..");
	toy_close(&e);

	open_fp(&e, "e", 10, hex9);
	CHECK(toy_stat(e.c, "disk", "swept") == 0 && n_equal(e.c) == 1,
	      "0a.. adopts 09.. by its prefix");
	REQUIRE(toy_run(&e, Q, NA + 50, "q3", 3, &t, 1, "Q under 0a..") == 0,
		"Q under 0a..");
	CHECK(t.plan.tier == CACHE_TIER_DISK && t.plan.start == 1248,
	      "Q from 09..'s files under 0a..: %s at %llu",
	      cache_tier_name(t.plan.tier), (unsigned long long)t.plan.start);
	cache_disk_wait(e.c);
	toy_close(&e);

	open_fp(&e, "f", 11, "0a0a0a0a0a0a0a0a0a0a");
	CHECK(toy_stat(e.c, "disk", "swept") == 0 && n_equal(e.c) == 2,
	      "0b.. adopts 0a.., and with it 09.. (%zu equal)", n_equal(e.c));
	REQUIRE(toy_run(&e, Q, NA + 50, "q4", 3, &t, 1, "Q under 0b..") == 0,
		"Q under 0b..");
	CHECK(t.plan.tier == CACHE_TIER_DISK && t.plan.start == 1248,
	      "Q from 09..'s files under 0b..: %s at %llu",
	      cache_tier_name(t.plan.tier), (unsigned long long)t.plan.start);
	cache_disk_wait(e.c);
	toy_close(&e);

	/* a bad flag: a clear error, no cache */
	static const char *const bad[] = {"07", "zz07070707070707",
					  "0707070"
					  "707070707a"};
	for (int i = 0; i < 3; i++) {
		cache_cfg cfg;
		cfg_of(&cfg, "g", bad[i]);
		cache *c = NULL;
		err[0] = 0;
		int rc = cache_new(&cfg, &c, err);
		CHECK(rc == MOOR_ERANGE && strstr(err, "--adopt-from") && !c,
		      "--adopt-from %s refused: %d %s", bad[i], rc, err);
		cache_free(c);
	}
	free(A);
	free(B);
	free(Q);
	dfile_rm_rf(AT_FDCWD, dir);
	return t_done("test_disk_adopt");
}
