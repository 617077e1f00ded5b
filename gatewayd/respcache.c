/* respcache.c: the response cache (--response-cache, off by default, so
 * that no benchmark is ever pointed at a dictionary by accident).
 *
 * Greedy output is a function of its input: an identical greedy request
 * (temperature 0 or top_k 1; the same prompt ids as the engine would read,
 * the same max_tokens, ignore_eos, reasoning budget and stop strings) is
 * answered from memory by replaying the generated tokens through the
 * reply machinery (reply.c, sse.c), whole or streamed. Only a generation
 * that ended on its own (stop or length, no stop string, no cancel) is
 * kept. The tokens are the ones the client received: a hidden span is not
 * among them (engined never streams it). usage says source
 * "response_cache", every prompt token cached, nothing re-read. A bounded
 * ring of GW_RC_ENTRIES; a hit compares the ids element by element (the
 * hash is a hint). A request that asks for logprobs is kept out of it,
 * neither answered from it nor kept in it (gw_rc_greedy): an entry keeps
 * the tokens, not their logprobs, and replaying them would need the
 * alternatives of every token too. Loop thread only. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gw.h"

typedef struct rc_entry {
	uint64_t hash;
	uint64_t salt; /* the tenant's: another salt never hits */
	int32_t *ids;
	size_t n_ids;
	uint32_t max_tokens, budget;
	int ignore_eos;
	char *stops; /* the stop strings, NUL-separated */
	size_t stops_len;
	int32_t *toks;
	uint32_t *fin;
	size_t n_toks;
	proto_done done;
} rc_entry;

/* The server's cache (gw_srv.rc): a ring, the oldest entry replaced. */
struct gw_rc {
	rc_entry ring[GW_RC_ENTRIES];
	unsigned next;
};

int gw_rc_init(gw_srv *s)
{
	s->rc = NULL;
	if (!s->cfg.response_cache)
		return 0;
	s->rc = calloc(1, sizeof *s->rc);
	return s->rc ? 0 : -ENOMEM;
}

static void entry_free(rc_entry *e)
{
	free(e->ids);
	free(e->stops);
	free(e->toks);
	free(e->fin);
	memset(e, 0, sizeof *e);
}

void gw_rc_fini(gw_srv *s)
{
	if (!s->rc)
		return;
	for (unsigned i = 0; i < GW_RC_ENTRIES; i++)
		entry_free(&s->rc->ring[i]);
	free(s->rc);
	s->rc = NULL;
}

int gw_rc_greedy(const gw_job *j)
{
	if (j->route == GW_ROUTE_PREWARM || j->p.logprobs)
		return 0;
	return j->p.temperature == 0.0f || j->p.top_k == 1;
}

static uint64_t key_hash(const gw_job *j)
{
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < j->p.n_ids; i++)
		h = (h ^ (uint32_t)j->p.ids[i]) * 1099511628211ull;
	h = (h ^ j->p.max_tokens) * 1099511628211ull;
	return h;
}

static void stops_of(const gw_job *j, moor_buf *b)
{
	for (size_t i = 0; i < j->p.n_stop; i++)
		moor_buf_put(b, j->p.stop[i], strlen(j->p.stop[i]) + 1);
}

static rc_entry *find(const gw_job *j)
{
	uint64_t h = key_hash(j);
	moor_buf st = {0};
	stops_of(j, &st);
	rc_entry *hit = NULL;
	for (unsigned i = 0; i < GW_RC_ENTRIES && !hit; i++) {
		rc_entry *e = &j->s->rc->ring[i];
		if (e->ids && e->hash == h && e->salt == j->salt &&
		    e->n_ids == j->p.n_ids &&
		    e->max_tokens == j->p.max_tokens &&
		    e->budget == j->p.reasoning_budget &&
		    e->ignore_eos == j->p.ignore_eos &&
		    e->stops_len == st.len &&
		    (!st.len || !memcmp(e->stops, st.p, st.len)) &&
		    !memcmp(e->ids, j->p.ids, j->p.n_ids * sizeof *e->ids))
			hit = e;
	}
	moor_buf_fini(&st);
	return hit;
}

int gw_rc_replay(gw_job *j)
{
	if (!j->s->rc || !gw_rc_greedy(j))
		return 0;
	rc_entry *e = find(j);
	if (!e)
		return 0;
	j->refs++; /* as the engine's, which gw_reply_finish drops */
	j->from_cache = 1;
	j->t_start = moor_now();
	for (size_t i = 0; i < e->n_toks && !j->have_done; i++) {
		proto_step_entry st = {
		    .req = j->rid, .token = e->toks[i], .finish = e->fin[i]};
		gw_reply_token(j, &st);
	}
	j->dn = e->done;
	j->dn.msg = NULL;
	j->dn.tier = PROTO_TIER_NONE;
	j->dn.prompt_tokens = j->p.n_ids;
	j->dn.cached_tokens = j->p.n_ids;
	j->dn.prefill_us = j->dn.decode_us = 0;
	j->done = 1;
	j->have_done = 1;
	moor_info("response cache: answered %zu prompt tokens, %zu tokens "
		  "from memory",
		  j->p.n_ids, e->n_toks);
	gw_reply_finish(j);
	return 1;
}

void gw_rc_record(gw_job *j, const proto_step_entry *e)
{
	if (!j->s->rc || !gw_rc_greedy(j) || j->from_cache)
		return;
	if (j->n_rec == j->cap_rec) {
		size_t cap = j->cap_rec ? 2 * j->cap_rec : 64;
		int32_t *t = realloc(j->rec, cap * sizeof *t);
		if (t)
			j->rec = t;
		uint32_t *f = t ? realloc(j->rec_fin, cap * sizeof *f) : NULL;
		if (f)
			j->rec_fin = f;
		if (!t || !f) {
			j->rec_failed = 1;
			return;
		}
		j->cap_rec = cap;
	}
	j->rec[j->n_rec] = e->token;
	j->rec_fin[j->n_rec++] = e->finish;
}

void gw_rc_keep(gw_job *j)
{
	const proto_done *d = &j->dn;
	if (!j->s->rc || !gw_rc_greedy(j) || j->from_cache || j->rec_failed ||
	    j->stopped || j->cancelled ||
	    (d->finish != PROTO_FINISH_STOP &&
	     d->finish != PROTO_FINISH_LENGTH) ||
	    find(j))
		return;
	gw_rc *rc = j->s->rc;
	rc_entry *e = &rc->ring[rc->next++ % GW_RC_ENTRIES];
	entry_free(e);
	moor_buf st = {0};
	stops_of(j, &st);
	e->ids = malloc((j->p.n_ids ? j->p.n_ids : 1) * sizeof *e->ids);
	if (!e->ids) {
		moor_buf_fini(&st);
		return;
	}
	memcpy(e->ids, j->p.ids, j->p.n_ids * sizeof *e->ids);
	e->n_ids = j->p.n_ids;
	e->hash = key_hash(j);
	e->salt = j->salt;
	e->max_tokens = j->p.max_tokens;
	e->budget = j->p.reasoning_budget;
	e->ignore_eos = j->p.ignore_eos;
	e->stops_len = st.len;
	e->stops = moor_buf_take(&st, &e->stops_len);
	e->toks = j->rec;
	e->fin = j->rec_fin;
	e->n_toks = j->n_rec;
	j->rec = NULL;
	j->rec_fin = NULL;
	j->n_rec = j->cap_rec = 0;
	e->done = *d;
	e->done.msg = NULL;
}
