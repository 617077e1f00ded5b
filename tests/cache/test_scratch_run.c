/* test_scratch_run: the compaction preparer's scratch run
 * (cache_scratch_plan, issue 12 point 3) leaves every cache as it was.
 *   - a conversation of two turns keeps anchors, an end anchor, marks and
 *     store entries; then a scratch run of a continuation (the end
 *     anchor's ids + 60 new ones, 8 greedy tokens) resumes at the end
 *     anchor, reserves no slot, and after its ABORT the stats JSON is
 *     byte-identical, the host arena memcmp-equal, the device arena equal
 *     outside the live sequence's buffers, and the live rows [0, valid)
 *     equal (the live sections and the rows past the end are scratch);
 *   - the end alignment's record (cache_end_get) answers during the run
 *     as before it;
 *   - the same continuation run as a real turn afterwards resumes at the
 *     end anchor and writes the same tokens as the scratch run (the
 *     prepared summary equals the one computed at request time) and as a
 *     cold run of the same ids (the greedy gate);
 *   - a scratch run stopped part way through its prefill (a request
 *     came: engined ABORTs) leaves everything as it was too, and one that
 *     a plan interrupts (no ABORT: an engine that died) is closed by that
 *     plan, which resumes at the end anchor. */
#include "eng_harness.h"

typedef struct snap {
	char *stats;
	char *dev, *host;
	size_t dev_n, host_n;
	char **rows; /* per view: rows [0, valid) */
	uint64_t valid;
} snap;

static size_t view_bytes(const cache_view *v, uint64_t window)
{
	size_t b = v->elt;
	for (uint32_t d = 0; d < v->ndim; d++)
		b *= d == v->token_axis ? window : (uint64_t)v->dims[d];
	return b;
}

static void snap_take(harness *h, snap *s)
{
	cache_arena_info ai;
	cache_arena_info_get(h->c, &ai);
	s->stats = cache_stats_json(h->c);
	s->valid = (uint64_t)h_stat(h->c, "resident.tokens");
	/* on CUDA the device arena is not host memory: the stats and the
	 * host arena are compared there, the device arena on the CPU */
	s->dev_n = tb_cuda() ? 0 : ai.dev_size;
	s->host_n = ai.host_size;
	s->dev = malloc(s->dev_n + 1);
	s->host = malloc(s->host_n);
	REQUIRE(s->stats && s->dev && s->host, "oom");
	memcpy(s->host, cache_host_base(h->c), s->host_n);
	if (!s->dev_n)
		return;
	memcpy(s->dev, cache_dev_base(h->c), s->dev_n);
	/* the live buffers are the scratch run's: blanked, their rows below
	 * valid kept aside */
	const cache_layout *l = h->lay;
	for (uint32_t i = 0; i < l->n_sections; i++)
		memset(s->dev + h->ho.sec_off[i], 0, l->sec[i].bytes);
	s->rows = calloc(l->n_views, sizeof *s->rows);
	REQUIRE(s->rows, "oom");
	for (uint32_t i = 0; i < l->n_views; i++) {
		const cache_view *v = &l->view[i];
		s->rows[i] = malloc(view_bytes(v, s->valid) + 1);
		REQUIRE(s->rows[i], "oom");
		cache_view_copy(v, s->rows[i], s->valid, 0,
				s->dev + h->ho.view_off[i], l->window, 0,
				s->valid);
		memset(s->dev + h->ho.view_off[i], 0, view_bytes(v, l->window));
	}
}

static void snap_free(harness *h, snap *s)
{
	for (uint32_t i = 0; s->rows && i < h->lay->n_views; i++)
		free(s->rows[i]);
	free(s->rows);
	free(s->stats);
	free(s->dev);
	free(s->host);
	memset(s, 0, sizeof *s);
}

static int snap_same(harness *h, const snap *a, const snap *b, const char *what)
{
	int ok = 1;
	if (strcmp(a->stats, b->stats)) {
		fprintf(stderr, "%s: stats\n  before %s\n  after  %s\n", what,
			a->stats, b->stats);
		ok = 0;
	}
	CHECK(a->valid == b->valid, "%s: valid %llu then %llu", what,
	      (unsigned long long)a->valid, (unsigned long long)b->valid);
	if (memcmp(a->host, b->host, a->host_n)) {
		fprintf(stderr, "%s: the host arena differs\n", what);
		ok = 0;
	}
	if (memcmp(a->dev, b->dev, a->dev_n)) {
		size_t k = 0;
		while (k < a->dev_n && a->dev[k] == b->dev[k])
			k++;
		fprintf(stderr,
			"%s: the device arena differs outside the live "
			"buffers (first at %zu)\n",
			what, k);
		ok = 0;
	}
	for (uint32_t i = 0;
	     a->rows && b->rows && i < h->lay->n_views && a->valid == b->valid;
	     i++)
		if (memcmp(a->rows[i], b->rows[i],
			   view_bytes(&h->lay->view[i], a->valid))) {
			fprintf(stderr, "%s: view %u's rows below valid\n",
				what, i);
			ok = 0;
		}
	CHECK(ok, "%s: the caches are not as they were", what);
	return ok;
}

/* A scratch run of ids[0, n): plan, prefill [start, stop_at) (n: the
 * whole), decode n_gen greedy tokens when whole; then ABORT unless
 * no_end. */
static void scratch(harness *h, const int32_t *ids, int64_t n, int64_t stop_at,
		    int n_gen, int32_t *gen, int no_end, cache_plan_out *po)
{
	char err[MOOR_ERRLEN] = "";
	cache_req r = {.ids = ids,
		       .n = (uint64_t)n,
		       .session = "s",
		       .max_tokens = (uint32_t)n_gen};
	REQUIRE(cache_scratch_plan(h->c, &r, po, err) == 0, "scratch plan: %s",
		err);
	REQUIRE(cache_sync(h->c) == 0, "sync");
	h->s.len = (int64_t)po->start;
	REQUIRE(eng_prefill(
		    h->m, &h->s, ids + po->start, stop_at - (int64_t)po->start,
		    h->lg + po->start * (size_t)h->V, ENG_LOGITS_ALL) == 0,
		"scratch prefill");
	if (stop_at == n)
		h_decode(h, &h->s, h->lg + (size_t)(n - 1) * h->V, n_gen, gen);
	REQUIRE(eng_model_sync(h->m) == 0, "sync");
	if (!no_end)
		REQUIRE(cache_abort(h->c, 0, 0) == 0, "the scratch run's end");
}

int main(void)
{
	moor_log_level = MOOR_LOG_WARN;
	cache_cfg cfg;
	h_cfg(&cfg, "scratch");
	harness h;
	h_open(&h, "f32_untied", 128, 2048, &cfg);
	int V = h.V;
	int32_t *A = h_ids(650, V, 71), *N = h_ids(400, V, 72);
	h_turn t;
	REQUIRE(h_turn_run(&h, A, 650, "s", 6, &t) == 0, "turn 1");
	state_free(&t.st);
	int32_t *P = h_cat(A, 650, t.gen, 6);
	int32_t *P2 = h_cat(P, 656, N, 40);
	REQUIRE(h_turn_run(&h, P2, 696, "s", 6, &t) == 0, "turn 2");
	state_free(&t.st);
	uint64_t E = (uint64_t)h_stat(h.c, "end.len");
	REQUIRE(E == 701, "the end anchor at %llu", (unsigned long long)E);
	/* the rows' ids up to the end: turn 2's prompt and its 5 absorbed */
	int32_t *R = h_cat(P2, 696, t.gen, 5);
	int32_t *C = h_cat(R, 701, N + 100, 60); /* the continuation */
	int64_t nc = 761;

	cache_end_out eo;
	cache_end_get(h.c, P2, 696, &eo);
	uint64_t end_before = eo.end;
	int tier_before = eo.tier;

	snap s0, s1;
	snap_take(&h, &s0);
	cache_plan_out po;
	int32_t sg[8];
	scratch(&h, C, nc, nc, 8, sg, 1, &po);
	CHECK(po.start == E && po.tier == CACHE_TIER_END && po.n_slots == 0,
	      "the scratch run resumes at the end anchor with no slot: %s at "
	      "%llu, %u slots",
	      cache_tier_name(po.tier), (unsigned long long)po.start,
	      po.n_slots);
	cache_end_get(h.c, P2, 696, &eo);
	CHECK(eo.tier == tier_before && eo.end == end_before,
	      "the end record during a scratch run: %d at %llu", eo.tier,
	      (unsigned long long)eo.end);
	REQUIRE(cache_abort(h.c, 0, 0) == 0, "the scratch run's end");
	snap_take(&h, &s1);
	snap_same(&h, &s0, &s1, "after a whole scratch run");
	snap_free(&h, &s1);

	/* stopped part way (a request came; engined ABORTs) */
	int32_t dummy[8];
	scratch(&h, C, nc, 730, 8, dummy, 0, &po);
	snap_take(&h, &s1);
	snap_same(&h, &s0, &s1, "after a scratch run stopped in its prefill");
	snap_free(&h, &s1);
	snap_free(&h, &s0);

	/* a refused one changes nothing either */
	char err[MOOR_ERRLEN];
	cache_req bad = {.ids = A, .n = 650, .session = "s", .max_tokens = 4};
	CHECK(cache_scratch_plan(h.c, &bad, &po, err) == MOOR_ERANGE,
	      "a scratch run that does not extend the end anchor");

	/* interrupted by a plan (no ABORT), which closes it: the real turn
	 * of the continuation resumes at the end anchor */
	scratch(&h, C, nc, 720, 8, dummy, 1, &po);
	REQUIRE(h_turn_run(&h, C, nc, "s", 8, &t) == 0, "the continuation");
	CHECK(t.plan.tier == CACHE_TIER_END && t.plan.start == E,
	      "the continuation resumes at the end anchor: %s at %llu",
	      cache_tier_name(t.plan.tier), (unsigned long long)t.plan.start);
	CHECK(!memcmp(t.gen, sg, sizeof sg),
	      "the continuation's tokens differ from the scratch run's");
	h_cold_out o;
	h_cold(&h, C, nc, 8, &o);
	CHECK(!memcmp(o.gen, t.gen, sizeof sg),
	      "the continuation's tokens differ from a cold run's");
	printf(
	    "scratch run of %lld tokens from %llu: tokens %d %d %d ... equal "
	    "to the real turn's and a cold run's\n",
	    (long long)nc, (unsigned long long)E, sg[0], sg[1], sg[2]);
	state_free(&o.st);
	state_free(&t.st);
	free(A), free(N), free(P), free(P2), free(R), free(C);
	h_close(&h);
	return t_done("test_scratch_run");
}
