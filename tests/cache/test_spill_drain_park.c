/* test_spill_drain_park: the drain writes the parked conversation too.
 *   - A (1,300 tokens, session a) then B (900 tokens, session b, parting
 *     at 0): A is parked whole with its end anchor (the park holds it);
 *   - the drain writes B (resident) and A (parked): two saves;
 *   - a new cache and engine read B back; A's next turn (A + its answer +
 *     60 tokens) resumes from the spill at A's end anchor (1305), and its
 *     logits, state and greedy tokens equal those of the same turn on a
 *     cache that never stopped (bit for bit);
 *   - with a prefill rate no read beats (--prefill-tps), a prompt sharing
 *     A's head is not served from the spill, and the refusal is counted
 *     ([spill] no entry served ... why=slow);
 *   - the line's other reasons, each provoked on a cache that reads an
 *     entry back and read from the log (no park, so RAM serves the rows in
 *     place): a prompt that parts from the entry below its end at the
 *     anchor RAM serves too (why=end_no_align); one that parts a few rows
 *     above the entry's anchor while RAM serves the grid line below it
 *     (why=short); and an entry written without its end anchor whose
 *     anchors RAM serves as well as it (why=anchors_below). */
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache_int.h"
#include "dfile.h"
#include "eng_harness.h"

static char dir[256];
static int no_park, no_end; /* the refusal's section */

static void open_h(harness *h, const char *name, int spill, uint32_t tps)
{
	cache_cfg cfg;
	h_cfg(&cfg, name);
	if (tps)
		cfg.prefill_tps = tps;
	if (no_park)
		cfg.park_bytes = 0;
	if (no_end)
		cfg.end_anchor = 0;
	cfg.spill_min_tokens = 600;
	cfg.store_sessions = 0;
	cfg.store_bytes = 0;
	cfg.disk_on = 0;
	if (spill)
		snprintf(cfg.spill_dir, sizeof cfg.spill_dir, "%s", dir);
	h_open(h, "f32_untied", 128, 2048, &cfg);
}

/* The "[spill] no entry served" lines of the log with why=`why`. */
static int why_n(const char *logf, const char *why)
{
	FILE *f = fopen(logf, "r");
	if (!f)
		return 0;
	char line[2048], w[64];
	snprintf(w, sizeof w, " why=%s", why);
	int n = 0;
	while (fgets(line, sizeof line, f))
		n += strstr(line, "[spill] no entry served: ") &&
		     strstr(line, w);
	fclose(f);
	return n;
}

/* The turn t was not served by the spill, which said why once. */
static void refused_why(const h_turn *t, const char *logf, const char *why,
			const char *what)
{
	int n = why_n(logf, why);
	CHECK(t->plan.tier != CACHE_TIER_SPILL && n == 1,
	      "%s: not from the spill (%s at %llu), why=%s said (%d)", what,
	      cache_tier_name(t->plan.tier), (unsigned long long)t->plan.start,
	      why, n);
}

/* The refusal's other reasons, the log captured (its info lines). */
static void refusals(void)
{
	char logf[300], err[MOOR_ERRLEN] = "";
	dfile_rm_rf(AT_FDCWD, dir);
	REQUIRE(mkdir(dir, 0700) == 0, "mkdir %s", dir);
	snprintf(logf, sizeof logf, "%s.log", dir);
	int lfd = open(logf, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	REQUIRE(lfd >= 0, "log file");
	fflush(stderr);
	int err_fd = dup(2);
	REQUIRE(err_fd >= 0 && dup2(lfd, 2) == 2, "dup2");
	close(lfd);
	int lvl = moor_log_level;
	moor_log_level = MOOR_LOG_INFO;
	no_park = 1;
	harness h;
	h_turn t;
	open_h(&h, "sdp-e", 1, 0);
	int V = h.V;
	int32_t *A = h_ids(1300, V, 121), *N = h_ids(200, V, 122),
		*W = h_ids(1300, V, 123);
	REQUIRE(h_turn_run(&h, A, 1300, "a", 6, &t) == 0, "A");
	state_free(&t.st);
	REQUIRE(cache_drain(h.c, err) == 0, "A's drain: %s", err);
	h_close(&h);

	/* A read back; Z parts from it at 1200, below its end (1305): RAM
	 * serves the anchor under 1200 as the entry would */
	int32_t *Z = h_cat(A, 1200, N, 100);
	h_part(Z, A, 1200, V);
	open_h(&h, "sdp-f", 1, 0);
	REQUIRE(h_turn_run(&h, Z, 1300, "z", 3, &t) == 0, "Z");
	refused_why(&t, logf, "end_no_align", "Z");
	state_free(&t.st);
	/* then S parts from A at 1290, above its anchor at 1280, while RAM
	 * (Z's rows, A's to 1200) serves the grid line under 1200 */
	int32_t *S = h_cat(A, 1290, N, 100);
	h_part(S, A, 1290, V);
	REQUIRE(h_turn_run(&h, S, 1390, "s", 3, &t) == 0, "S");
	refused_why(&t, logf, "short", "S");
	h_exact(&h, S, 1390, &t, "S without the spill");
	state_free(&t.st);
	h_close(&h);

	/* W written without its end anchor; its next turn: RAM serves W's
	 * newest anchor, the entry nothing above it */
	no_end = 1;
	open_h(&h, "sdp-g", 1, 0);
	REQUIRE(h_turn_run(&h, W, 1300, "w", 6, &t) == 0, "W");
	int32_t *W2 = h_cat(W, 1300, t.gen, 5), *W3 = h_cat(W2, 1305, N, 60);
	state_free(&t.st);
	err[0] = 0;
	REQUIRE(cache_drain(h.c, err) == 0, "W's drain: %s", err);
	h_close(&h);
	open_h(&h, "sdp-h", 1, 0);
	REQUIRE(h_turn_run(&h, W3, 1365, "w", 3, &t) == 0, "W3");
	refused_why(&t, logf, "anchors_below", "W3");
	CHECK(h_stat(h.c, "spill.refused") == 1, "counted: %lld",
	      h_stat(h.c, "spill.refused"));
	state_free(&t.st);
	h_close(&h);
	no_end = no_park = 0;

	moor_log_level = lvl;
	fflush(stderr);
	dup2(err_fd, 2);
	close(err_fd);
	if (t_failed || getenv("T_VERBOSE")) {
		char cmd[400];
		snprintf(cmd, sizeof cmd, "grep -a 'spill\\|check' %s >&2",
			 logf);
		(void)!system(cmd);
	}
	unlink(logf);
	free(A);
	free(N);
	free(W);
	free(Z);
	free(S);
	free(W2);
	free(W3);
}

int main(void)
{
	moor_log_level = MOOR_LOG_WARN;
	snprintf(dir, sizeof dir, "/tmp/moor-spill-park-XXXXXX");
	REQUIRE(mkdtemp(dir), "mkdtemp");
	harness h, h3;
	h_turn t, t3;
	char err[MOOR_ERRLEN] = "";
	open_h(&h, "sdp-a", 1, 0);
	int V = h.V;
	int32_t *A = h_ids(1300, V, 111), *B = h_ids(900, V, 112),
		*N = h_ids(300, V, 113);
	h_part(B, A, 0, V);
	REQUIRE(h_turn_run(&h, A, 1300, "a", 6, &t) == 0, "A");
	int32_t ans[H_MAX_GEN];
	memcpy(ans, t.gen, sizeof ans);
	state_free(&t.st);
	REQUIRE(h_turn_run(&h, B, 900, "b", 4, &t) == 0, "B");
	state_free(&t.st);
	CHECK(h_stat(h.c, "park.parks") == 1, "A is parked");
	REQUIRE(cache_drain(h.c, err) == 0, "drain: %s", err);
	CHECK(h_stat(h.c, "spill.saves") == 2,
	      "the drain wrote the resident and the parked conversation: "
	      "%lld saves",
	      h_stat(h.c, "spill.saves"));
	h_close(&h);

	open_h(&h, "sdp-b", 1, 0);
	CHECK(h.ho.resident_len == 903, "B is read back: %llu",
	      (unsigned long long)h.ho.resident_len);
	int32_t *P = h_cat(A, 1300, ans, 6);
	int32_t *P2 = h_cat(P, 1306, N, 60);
	REQUIRE(h_turn_run(&h, P2, 1366, "a", 6, &t) == 0, "A again");
	CHECK(t.plan.tier == CACHE_TIER_SPILL && t.plan.start == 1305,
	      "A's next turn resumes from the spill at 1305: %s at %llu",
	      cache_tier_name(t.plan.tier), (unsigned long long)t.plan.start);
	open_h(&h3, "sdp-c", 0, 0);
	REQUIRE(h_turn_run(&h3, A, 1300, "a", 6, &t3) == 0, "control A");
	state_free(&t3.st);
	REQUIRE(h_turn_run(&h3, P2, 1366, "a", 6, &t3) == 0, "control A2");
	CHECK(t3.plan.tier == CACHE_TIER_END && t3.plan.start == 1305,
	      "the control resumes at its end anchor");
	CHECK(!memcmp(h.lg + 1305 * (size_t)V, h3.lg + 1305 * (size_t)V,
		      61 * (size_t)V * sizeof(float)),
	      "the logits from the drained park equal the unstopped cache's");
	state_equal(h.y, &t.st, &t3.st, 1366,
		    "the state from the drained park equals the unstopped "
		    "cache's");
	CHECK(!memcmp(t.gen, t3.gen, 6 * sizeof(int32_t)),
	      "the same greedy tokens");
	state_free(&t.st);
	state_free(&t3.st);
	h_close(&h3);
	h_close(&h);

	/* an engine so fast that no read pays: the entry that shares A's
	 * head is not served, and says why */
	open_h(&h, "sdp-d", 1, 4000000000u);
	int32_t *Z = h_cat(A, 1200, N, 100);
	h_part(Z, A, 1200, V);
	REQUIRE(h_turn_run(&h, Z, 1300, "z", 3, &t) == 0, "Z");
	CHECK(t.plan.tier != CACHE_TIER_SPILL &&
		  h_stat(h.c, "spill.refused") == 1,
	      "Z is not served from the spill (%s) and the refusal is "
	      "counted: %lld",
	      cache_tier_name(t.plan.tier), h_stat(h.c, "spill.refused"));
	h_exact(&h, Z, 1300, &t, "Z without the spill");
	state_free(&t.st);
	h_close(&h);
	free(Z);
	free(A);
	free(B);
	free(N);
	free(P);
	free(P2);
	refusals();
	dfile_rm_rf(AT_FDCWD, dir);
	return t_done("test_spill_drain_park");
}
