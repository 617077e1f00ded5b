/* metrics.c: the gateway's counters (loop thread only, so no locks),
 * their Prometheus text for GET /metrics, and the prefill rate of the last
 * long prefills (the peek's reread_eta_ms). */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw.h"

static const char *const route_names[GW_ROUTE_N] = {"/v1/chat/completions",
						    "/v1/completions",
						    "/v1/models",
						    "/health",
						    "/metrics",
						    "/v1/cache/stats",
						    "/v1/cache/clear",
						    "/v1/cache/peek",
						    "/v1/cache/prewarm",
						    "other"};

/* upper bounds of the TTFT buckets, seconds */
static const double ttft_le[GW_TTFT_BUCKETS] = {
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};

void gw_metrics_count(gw_srv *s, int route, int code)
{
	gw_metrics *m = &s->m;
	if (route == GW_ROUTE_PEEK) /* a dry run counts nothing */
		return;
	for (int i = 0; i < m->n_codes; i++)
		if (m->codes[i].route == route && m->codes[i].code == code) {
			m->codes[i].n++;
			return;
		}
	if (m->n_codes < (int)(sizeof m->codes / sizeof m->codes[0]))
		m->codes[m->n_codes++] = (gw_code_count){route, code, 1};
}

void gw_metrics_done(gw_srv *s, const proto_done *d)
{
	gw_metrics *m = &s->m;
	m->prompt_tokens += d->prompt_tokens;
	m->completion_tokens += d->completion_tokens;
	m->cached_tokens += d->cached_tokens;
	if (d->tier < sizeof m->tier_hits / sizeof m->tier_hits[0])
		m->tier_hits[d->tier]++;
}

void gw_metrics_ttft(gw_srv *s, double sec)
{
	gw_metrics *m = &s->m;
	int b = 0;
	while (b < GW_TTFT_BUCKETS && sec > ttft_le[b])
		b++;
	m->ttft_bucket[b]++;
	m->ttft_sum += sec;
	m->ttft_count++;
}

static uint64_t stat_u(const json_t *stats, const char *obj, const char *k)
{
	const json_t *v = json_object_get(json_object_get(stats, obj), k);
	return json_is_integer(v) ? (uint64_t)json_integer_value(v) : 0;
}

char *gw_metrics_text(gw_srv *s, const json_t *stats, size_t *len)
{
	gw_metrics *m = &s->m;
	moor_buf b = {0};
	moor_buf_printf(&b,
			"# HELP moor_requests_total HTTP requests answered, by "
			"route and status code.\n"
			"# TYPE moor_requests_total counter\n");
	for (int i = 0; i < m->n_codes; i++)
		moor_buf_printf(&b,
				"moor_requests_total{route=\"%s\",code=\"%d\"} "
				"%llu\n",
				route_names[m->codes[i].route],
				m->codes[i].code,
				(unsigned long long)m->codes[i].n);
	moor_buf_printf(
	    &b,
	    "# HELP moor_prompt_tokens_total Prompt tokens of finished "
	    "generations.\n# TYPE moor_prompt_tokens_total counter\n"
	    "moor_prompt_tokens_total %llu\n"
	    "# HELP moor_completion_tokens_total Generated tokens.\n"
	    "# TYPE moor_completion_tokens_total counter\n"
	    "moor_completion_tokens_total %llu\n"
	    "# HELP moor_cached_tokens_total Prompt tokens restored from "
	    "a cache instead of prefilled.\n"
	    "# TYPE moor_cached_tokens_total counter\n"
	    "moor_cached_tokens_total %llu\n",
	    (unsigned long long)m->prompt_tokens,
	    (unsigned long long)m->completion_tokens,
	    (unsigned long long)m->cached_tokens);
	moor_buf_printf(&b,
			"# HELP moor_cache_hits_total Generations by the cache "
			"tier their prompt resumed from.\n"
			"# TYPE moor_cache_hits_total counter\n");
	for (uint32_t t = 0; t <= PROTO_TIER_DISK; t++)
		moor_buf_printf(&b, "moor_cache_hits_total{tier=\"%s\"} %llu\n",
				proto_tier(t)->source,
				(unsigned long long)m->tier_hits[t]);
	moor_buf_printf(&b, "# HELP moor_ttft_seconds Time from sending a "
			    "generation to engined to its first token.\n"
			    "# TYPE moor_ttft_seconds histogram\n");
	uint64_t cum = 0;
	for (int i = 0; i < GW_TTFT_BUCKETS; i++) {
		cum += m->ttft_bucket[i];
		moor_buf_printf(&b,
				"moor_ttft_seconds_bucket{le=\"%g\"} %llu\n",
				ttft_le[i], (unsigned long long)cum);
	}
	cum += m->ttft_bucket[GW_TTFT_BUCKETS];
	moor_buf_printf(&b,
			"moor_ttft_seconds_bucket{le=\"+Inf\"} %llu\n"
			"moor_ttft_seconds_sum %.6f\n"
			"moor_ttft_seconds_count %llu\n",
			(unsigned long long)cum, m->ttft_sum,
			(unsigned long long)m->ttft_count);
	if (stats) {
		static const char *const caches[] = {
		    "resident", "end", "stash", "pin", "park", "store",
		    "spill", "disk"};
		moor_buf_printf(
		    &b, "# HELP moor_cache_bytes Bytes each cache holds "
			"(cached's stats).\n"
			"# TYPE moor_cache_bytes gauge\n");
		for (size_t i = 0; i < sizeof caches / sizeof caches[0]; i++)
			moor_buf_printf(&b,
					"moor_cache_bytes{cache=\"%s\"} %llu\n",
					caches[i],
					(unsigned long long)stat_u(
					    stats, caches[i], "bytes"));
		moor_buf_printf(
		    &b, "moor_cache_bytes{cache=\"memory_held\"} %llu\n",
		    (unsigned long long)stat_u(stats, "memory", "held"));
		/* the session spill's traffic (cached's "spill" object) */
		static const char *const sp[] = {
		    "saves",	      "save_failed",   "restores",
		    "restore_failed", "bytes_written", "bytes_read",
		    "floor_binds",    "floor_evicted"};
		moor_buf_printf(&b, "# HELP moor_spill_total The session "
				    "spill's counters (cached's stats).\n"
				    "# TYPE moor_spill_total counter\n");
		for (size_t i = 0; i < sizeof sp / sizeof sp[0]; i++)
			moor_buf_printf(&b,
					"moor_spill_total{what=\"%s\"} %llu\n",
					sp[i],
					(unsigned long long)stat_u(
					    stats, "spill", sp[i]));
		/* the disk tier's (cached's "disk" object) */
		static const char *const dk[] = {
		    "hits",	       "hit_failed",	  "bytes_read",
		    "bytes_written",   "chunks_written",  "anchors_written",
		    "write_failed",    "window",	  "evicted",
		    "floor_binds"};
		moor_buf_printf(&b, "# HELP moor_disk_total The disk tier's "
				    "counters (cached's stats).\n"
				    "# TYPE moor_disk_total counter\n");
		for (size_t i = 0; i < sizeof dk / sizeof dk[0]; i++)
			moor_buf_printf(&b,
					"moor_disk_total{what=\"%s\"} %llu\n",
					dk[i],
					(unsigned long long)stat_u(
					    stats, "disk", dk[i]));
		/* the write guard's day (cached's "disk_writes"): gauges,
		 * the count starts again each day */
		moor_buf_printf(
		    &b,
		    "# HELP moor_disk_writes_bytes The day's drive writes of "
		    "the disk tier and the session spill (cached's "
		    "disk_writes).\n"
		    "# TYPE moor_disk_writes_bytes gauge\n"
		    "moor_disk_writes_bytes{who=\"tier\"} %llu\n"
		    "moor_disk_writes_bytes{who=\"spill\"} %llu\n"
		    "# HELP moor_disk_write_budget_bytes The day's write "
		    "budget (--disk-write-budget-gb; 0: none).\n"
		    "# TYPE moor_disk_write_budget_bytes gauge\n"
		    "moor_disk_write_budget_bytes %llu\n"
		    "# HELP moor_disk_guard_skips Writes the guard skipped "
		    "today, by its level.\n"
		    "# TYPE moor_disk_guard_skips gauge\n"
		    "moor_disk_guard_skips{level=\"over\"} %llu\n"
		    "moor_disk_guard_skips{level=\"hard\"} %llu\n",
		    (unsigned long long)stat_u(stats, "disk_writes", "tier"),
		    (unsigned long long)stat_u(stats, "disk_writes", "spill"),
		    (unsigned long long)stat_u(stats, "disk_writes", "budget"),
		    (unsigned long long)stat_u(stats, "disk_writes",
					       "skips_over"),
		    (unsigned long long)stat_u(stats, "disk_writes",
					       "skips_hard"));
	}
	moor_buf_printf(
	    &b,
	    "# HELP moor_queue_waiting Requests waiting for admission "
	    "(--queue-max).\n# TYPE moor_queue_waiting gauge\n"
	    "moor_queue_waiting %u\n"
	    "# HELP moor_queue_inflight Requests admitted: their bodies being "
	    "read, or their generations running (--inflight).\n"
	    "# TYPE moor_queue_inflight gauge\nmoor_queue_inflight %u\n"
	    "# HELP moor_body_reads_peak The most request bodies read at once "
	    "(parsed, rendered, tokenized) since the start: at most "
	    "--inflight.\n# TYPE moor_body_reads_peak gauge\n"
	    "moor_body_reads_peak %u\n",
	    s->admit.n_queued, s->admit.n_inflight, s->reading_peak);
	moor_buf_printf(&b,
			"# HELP moor_engine_up 1 when engined's pipe is up.\n"
			"# TYPE moor_engine_up gauge\nmoor_engine_up %d\n"
			"# HELP moor_cached_up 1 when cached answered a stats "
			"round trip for this scrape.\n"
			"# TYPE moor_cached_up gauge\nmoor_cached_up %d\n",
			atomic_load(&s->link.pipe) ? 1 : 0, stats ? 1 : 0);
	return moor_buf_take(&b, len);
}

/* ---- prefill rate ------------------------------------------------------- */

void gw_prefill_sample(gw_srv *s, const proto_done *d)
{
	uint64_t fwd = d->prompt_tokens > d->cached_tokens
			   ? d->prompt_tokens - d->cached_tokens
			   : 0;
	if (fwd < GW_PREFILL_LONG_TOKENS || d->prefill_us == 0)
		return;
	s->pf_rate[s->pf_k] = (double)fwd / (d->prefill_us / 1e6);
	s->pf_k = (s->pf_k + 1) % GW_PREFILL_SAMPLES;
	if (s->pf_n < GW_PREFILL_SAMPLES)
		s->pf_n++;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

double gw_prefill_rate(const gw_srv *s)
{
	if (!s->pf_n)
		return GW_PREFILL_PRIOR_TPS;
	double v[GW_PREFILL_SAMPLES];
	memcpy(v, s->pf_rate, (size_t)s->pf_n * sizeof *v);
	qsort(v, (size_t)s->pf_n, sizeof *v, cmp_d);
	return s->pf_n % 2 ? v[s->pf_n / 2]
			   : (v[s->pf_n / 2 - 1] + v[s->pf_n / 2]) / 2;
}
