/* endalign.c: the end alignment (endalign.h says the rule and why it runs
 * in the gateway).
 *
 * The walk: the rows' tokens from w (the parting point, moved back over
 * whitespace tokens the two share) to the end anchor against the copy's
 * bytes from the same point. The rows are cut into segments at each
 * generation region's reasoning (its <think>, else the region's start);
 * each segment is matched with one choice for its region (pass 2: the
 * reasoning kept, emptied, or left out with its tags), the first that
 * matches up to the next segment; hidden spans are skipped in both passes.
 * Inside a segment a run of the rows' tokens that are skipped or
 * whitespace-only, holding at least one skipped token, is glue: it eats
 * the copy's whitespace there, except the leading whitespace the rows'
 * next token starts with. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "endalign.h"

typedef struct walk {
	const gw_align_in *in;
	const int32_t *rows; /* [end]: copy[0, common) + tail */
	const char *cb;	     /* the copy's bytes from w */
	size_t ncb;
	uint8_t *skip; /* [end]: 1 hidden, 2 reasoning (this choice) */
	uint8_t *soft; /* [end]: 1 where a region's part starts or ends */
	size_t w;      /* the walk's start */
	const char *disp; /* the rows' bytes from w as the client got them */
	const size_t *doff; /* [end - w + 1]: token p's are disp[doff[p-w]..] */
	int32_t think_open, think_close;
	size_t fail_row, fail_k; /* the furthest mismatch: row, copy byte */
} walk;

static int is_ws_byte(char c)
{
	return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

static const char *tb(const walk *W, size_t p, size_t *len)
{
	if (W->disp && p >= W->w) {
		*len = W->doff[p - W->w + 1] - W->doff[p - W->w];
		return W->disp + W->doff[p - W->w];
	}
	const char *b = gw_tok_token_bytes(W->in->tok, W->rows[p], len);
	if (!b)
		*len = 0;
	return b;
}

static int tok_ws(const walk *W, size_t p)
{
	size_t n;
	const char *b = tb(W, p, &n);
	if (!b || !n)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!is_ws_byte(b[i]))
			return 0;
	return 1;
}

/* Matches rows [p0, p1) against the copy's bytes from *k; advances *k.
 * The rows' side is their bytes with a marker where a skipped span was and
 * at each soft point (a region's parts, which the templates trim); the
 * whitespace bytes next to a marker are dropped from the rows' side and a
 * marker takes any whitespace of the copy's. Every other byte must be
 * equal. */
static int match_range(walk *W, size_t p0, size_t p1, size_t *kp)
{
	size_t tot = 0;
	for (size_t p = p0; p < p1; p++) {
		size_t n;
		tb(W, p, &n);
		tot += n + 2;
	}
	char *rb = malloc(tot + 1);
	uint8_t *kind = malloc(tot + 1); /* 0 byte, 1 marker, 2 dropped */
	size_t *row = malloc((tot + 1) * sizeof *row); /* each byte's token */
	if (!rb || !kind || !row) {
		free(rb);
		free(kind);
		free(row);
		return -ENOMEM;
	}
	size_t m = 0;
	for (size_t p = p0; p < p1; p++) {
		if ((W->soft && W->soft[p]) || W->skip[p]) {
			if (!m || kind[m - 1] != 1) {
				row[m] = p;
				kind[m++] = 1;
			}
			if (W->skip[p])
				continue;
		}
		size_t n;
		const char *b = tb(W, p, &n);
		for (size_t i = 0; b && i < n; i++) {
			rb[m] = b[i];
			row[m] = p;
			kind[m++] = 0;
		}
	}
	for (size_t i = 0; i < m; i++) {
		if (kind[i] != 1)
			continue;
		for (size_t q = i; q > 0 && kind[q - 1] != 1 &&
				   is_ws_byte(rb[q - 1]);
		     q--)
			kind[q - 1] = 2;
		for (size_t q = i + 1; q < m && kind[q] != 1 && is_ws_byte(rb[q]);
		     q++)
			kind[q] = 2;
	}
	size_t k = *kp;
	int rc = 0;
	for (size_t i = 0; i < m && !rc; i++) {
		if (kind[i] == 2)
			continue;
		if (kind[i] == 1) {
			while (k < W->ncb && is_ws_byte(W->cb[k]))
				k++;
			continue;
		}
		if (k >= W->ncb || W->cb[k] != rb[i]) {
			rc = -1;
			if (k >= W->fail_k) {
				W->fail_k = k;
				W->fail_row = row[i];
			}
		} else {
			k++;
		}
	}
	free(rb);
	free(kind);
	free(row);
	if (!rc)
		*kp = k;
	return rc;
}

/* One step of a lossy UTF-8 decode at s[0, n): the bytes it takes; *ok 0
 * for a maximal invalid subpart (one U+FFFD, WHATWG's TextDecoder rule,
 * which the tokenizer's decode and stream follow). */
static size_t utf8_step(const uint8_t *s, size_t n, int *ok)
{
	uint8_t c = s[0], lo = 0x80, hi = 0xBF;
	size_t need;
	*ok = 1;
	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF)
		need = 1;
	else if (c == 0xE0)
		need = 2, lo = 0xA0;
	else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF)
		need = 2;
	else if (c == 0xED)
		need = 2, hi = 0x9F;
	else if (c == 0xF0)
		need = 3, lo = 0x90;
	else if (c >= 0xF1 && c <= 0xF3)
		need = 3;
	else if (c == 0xF4)
		need = 3, hi = 0x8F;
	else {
		*ok = 0;
		return 1;
	}
	for (size_t i = 1; i <= need; i++) {
		uint8_t b = i < n ? s[i] : 0;
		if (i >= n || (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF))) {
			*ok = 0;
			return i;
		}
	}
	return need + 1;
}

/* The rows' bytes [w, end) as the client's copy holds them: a byte
 * sequence that is not UTF-8 (a model may emit one) reached the client as
 * U+FFFD, which the copy then holds, and the tokenizer normalized the copy
 * (NFC), so a span of the answer that was not NFC is compared normalized.
 * A replacement belongs to the token where its bytes start, a normalized
 * span to the token of its first byte (the others in it show no bytes). */
static int rows_display(walk *W, size_t w, size_t end, char **disp,
			size_t **doff)
{
	size_t tot = 0;
	for (size_t p = w; p < end; p++) {
		size_t n;
		if (gw_tok_token_bytes(W->in->tok, W->rows[p], &n))
			tot += n;
	}
	uint8_t *raw = malloc(tot + 1);
	uint32_t *own = malloc((tot + 1) * sizeof *own);
	char *d = malloc(3 * tot + 1);
	uint32_t *dt = malloc((3 * tot + 1) * sizeof *dt); /* d's tokens */
	size_t *o = calloc(end - w + 1, sizeof *o);
	if (!raw || !own || !d || !dt || !o) {
		free(raw);
		free(own);
		free(d);
		free(dt);
		free(o);
		return -ENOMEM;
	}
	size_t k = 0;
	for (size_t p = w; p < end; p++) {
		size_t n;
		const char *b = gw_tok_token_bytes(W->in->tok, W->rows[p], &n);
		for (size_t i = 0; b && i < n; i++) {
			raw[k] = (uint8_t)b[i];
			own[k++] = (uint32_t)(p - w);
		}
	}
	size_t dl = 0;
	for (size_t i = 0; i < tot;) {
		int ok;
		size_t m = utf8_step(raw + i, tot - i, &ok);
		const char *src = ok ? (const char *)raw + i : "\xef\xbf\xbd";
		size_t sl = ok ? m : 3;
		memcpy(d + dl, src, sl);
		for (size_t q = 0; q < sl; q++)
			dt[dl + q] = own[i];
		dl += sl;
		i += m;
	}
	free(raw);
	free(own);
	char *nd = NULL;
	uint32_t *ndt = NULL;
	size_t ndl = dl;
	if (gw_tok_normalize_tagged(W->in->tok, d, dl, dt, &nd, &ndt, &ndl)) {
		free(d);
		free(dt);
		free(o);
		return -ENOMEM;
	}
	if (nd) {
		free(d);
		free(dt);
		d = nd;
		dt = ndt;
		dl = ndl;
	}
	/* o[t + 1]: display bytes of token t, then prefix sums */
	for (size_t i = 0; i < dl; i++)
		o[dt[i] + 1]++;
	for (size_t t = 0; t < end - w; t++)
		o[t + 1] += o[t];
	free(dt);
	*disp = d;
	*doff = o;
	return 0;
}

typedef struct region {
	size_t bound; /* the segment starts here */
	size_t open;  /* <think> (or SIZE_MAX) */
	size_t close; /* the first </think> */
} region;

/* The regions whose reasoning the copy may leave out, from w on. */
static size_t find_regions(const walk *W, size_t w, region *out, size_t max)
{
	const gw_align_in *in = W->in;
	size_t n = 0;
	for (size_t i = 0; i < in->n_marks && n < max; i++) {
		const gw_align_mark *m = &in->marks[i];
		if (m->kind != GW_MARK_GEN || m->start + m->len > in->end)
			continue;
		size_t s = (size_t)m->start, e = (size_t)(m->start + m->len);
		size_t close = SIZE_MAX;
		for (size_t p = s; p < e; p++)
			if (W->rows[p] == W->think_close) {
				close = p;
				break;
			}
		if (close == SIZE_MAX || close < w)
			continue;
		size_t open = SIZE_MAX;
		size_t lo = s >= 4 ? s - 4 : 0;
		for (size_t p = close; p > lo; p--)
			if (W->rows[p - 1] == W->think_open) {
				open = p - 1;
				break;
			}
		size_t bound = open != SIZE_MAX ? open : s;
		if (bound < w)
			bound = w;
		if (n && bound <= out[n - 1].close)
			continue;
		out[n++] = (region){bound, open, close};
	}
	return n;
}

/* Marks region r's reasoning skipped for choice ch (0 kept, 1 emptied,
 * 2 left out with its tags), from w on; clears it first. */
static void set_choice(walk *W, const region *r, size_t w, int ch)
{
	size_t a = r->open != SIZE_MAX ? r->open : r->bound;
	for (size_t p = a; p <= r->close; p++)
		if (W->skip[p] == 2)
			W->skip[p] = 0;
	if (!ch)
		return;
	size_t lo = ch == 1 ? (r->open != SIZE_MAX ? r->open + 1 : r->bound)
			    : a;
	size_t hi = ch == 1 ? r->close : r->close + 1;
	for (size_t p = lo < w ? w : lo; p < hi; p++)
		if (!W->skip[p])
			W->skip[p] = 2;
}

static int run_pass(walk *W, size_t w, int pass, size_t *k_end)
{
	const gw_align_in *in = W->in;
	size_t end = in->end;
	region *rg = NULL;
	size_t nr = 0;
	if (pass == 2 && W->think_close >= 0) {
		rg = malloc((in->n_marks + 1) * sizeof *rg);
		if (!rg)
			return -ENOMEM;
		nr = find_regions(W, w, rg, in->n_marks + 1);
		if (!nr) {
			free(rg);
			return 1;
		}
	}
	size_t k = 0;
	size_t p = w;
	int rc = 0;
	for (size_t i = 0; i <= nr && !rc; i++) {
		size_t seg_end = i < nr ? rg[i].bound : end;
		if (i > 0) {
			/* the segment of region i - 1 */
			const region *r = &rg[i - 1];
			int ok = 0;
			for (int ch = 0; ch < 3 && !ok; ch++) {
				set_choice(W, r, w, ch);
				size_t kk = k;
				if (!match_range(W, p, seg_end, &kk)) {
					ok = 1;
					k = kk;
				}
			}
			if (!ok)
				rc = 1;
		} else if (match_range(W, p, seg_end, &k)) {
			rc = 1;
		}
		p = seg_end;
	}
	free(rg);
	*k_end = k;
	return rc;
}

int gw_end_align(const gw_align_in *in, gw_align_out *out)
{
	memset(out, 0, sizeof *out);
	if (!in->tok || in->common >= in->end || in->common > in->n_copy ||
	    !in->tail)
		return 0;
	size_t end = in->end;
	int32_t *rows = malloc(end * sizeof *rows);
	uint8_t *skip = calloc(end, 1);
	size_t nc = in->n_copy;
	size_t *off = malloc((nc + 1) * sizeof *off);
	char *cb = NULL, *disp = NULL;
	size_t *doff = NULL;
	int rc = -ENOMEM;
	walk W = {0};
	if (!rows || !skip || !off)
		goto done;
	memcpy(rows, in->copy, in->common * sizeof *rows);
	memcpy(rows + in->common, in->tail,
	       (end - in->common) * sizeof *rows);
	W.in = in;
	W.rows = rows;
	W.skip = skip;
	W.think_open = gw_tok_token_id(in->tok, "<think>");
	W.think_close = gw_tok_token_id(in->tok, "</think>");
	for (size_t i = 0; i < in->n_marks; i++) {
		const gw_align_mark *m = &in->marks[i];
		if (m->kind != GW_MARK_HIDDEN)
			continue;
		for (uint64_t p = m->start; p < m->start + m->len && p < end;
		     p++)
			skip[p] = 1;
	}
	/* the soft points: where each generation region's reasoning and
	 * answer start and end (the templates trim them) */
	uint8_t *soft = calloc(end + 1, 1);
	if (!soft)
		goto done;
	W.soft = soft;
	for (size_t i = 0; i < in->n_marks; i++) {
		const gw_align_mark *m = &in->marks[i];
		if (m->kind != GW_MARK_GEN || m->start + m->len > end || !m->len)
			continue;
		size_t s0 = (size_t)m->start, e0 = (size_t)(m->start + m->len);
		soft[s0] = 1;
		for (size_t p = s0; p < e0; p++)
			if (rows[p] == W.think_close) {
				soft[p] = 1;
				soft[p + 1] = 1;
				break;
			}
		if (e0 < end)
			soft[e0] = 1;
	}
	soft[end] = 0;
	/* back over the whitespace both hold: glue may start there */
	size_t w = in->common;
	while (w > 0 && !skip[w - 1] && tok_ws(&W, w - 1))
		w--;
	if (rows_display(&W, w, end, &disp, &doff))
		goto done;
	W.w = w;
	W.disp = disp;
	W.doff = doff;
	/* the copy's bytes from w, with each token's offset */
	size_t tot = 0;
	for (size_t i = w; i < nc; i++) {
		size_t n;
		if (!gw_tok_token_bytes(in->tok, in->copy[i], &n))
			n = 0;
		tot += n;
	}
	cb = malloc(tot + 1);
	if (!cb)
		goto done;
	size_t k = 0;
	for (size_t i = w; i < nc; i++) {
		size_t n;
		const char *b = gw_tok_token_bytes(in->tok, in->copy[i], &n);
		off[i - w] = k;
		if (b && n)
			memcpy(cb + k, b, n);
		k += b ? n : 0;
	}
	off[nc - w] = k;
	W.cb = cb;
	W.ncb = tot;

	size_t k_end = 0;
	int pass = 0;
	W.fail_row = end;
	rc = run_pass(&W, w, 1, &k_end);
	/* the first pass's stop, in tokens of each side */
	out->fail_row = W.fail_row;
	out->fail_copy = w;
	while (out->fail_copy < nc && off[out->fail_copy + 1 - w] <= W.fail_k)
		out->fail_copy++;
	if (rc == 1 && in->reasoning_pass) {
		memset(skip, 0, end);
		for (size_t i = 0; i < in->n_marks; i++) {
			const gw_align_mark *m = &in->marks[i];
			if (m->kind == GW_MARK_HIDDEN)
				for (uint64_t p = m->start;
				     p < m->start + m->len && p < end; p++)
					skip[p] = 1;
		}
		rc = run_pass(&W, w, 2, &k_end);
		if (!rc)
			pass = 2;
	} else if (!rc) {
		pass = 1;
	}
	if (rc < 0)
		goto done;
	if (rc) {
		rc = 0;
		goto done;
	}
	/* the copy's token where the end anchor falls */
	size_t j = 0;
	while (j < nc - w && off[j + 1] <= k_end)
		j++;
	int32_t *rest = NULL;
	size_t n_rest = 0;
	size_t next = w + j; /* the copy's first token after the end */
	if (j < nc - w && off[j] < k_end) {
		/* the end falls inside copy token w + j: its remaining
		 * bytes alone */
		int e = gw_tok_encode(in->tok, cb + k_end, off[j + 1] - k_end,
				      &rest, &n_rest);
		if (e == -ENOMEM) {
			rc = -ENOMEM;
			goto done;
		}
		if (e) { /* not whole UTF-8: not aligned */
			rc = 0;
			goto done;
		}
		next++;
	}
	out->n = end + n_rest + (nc - next);
	out->ids = malloc((out->n ? out->n : 1) * sizeof *out->ids);
	if (!out->ids) {
		free(rest);
		out->n = 0;
		rc = -ENOMEM;
		goto done;
	}
	memcpy(out->ids, rows, end * sizeof *rows);
	if (n_rest)
		memcpy(out->ids + end, rest, n_rest * sizeof *rest);
	memcpy(out->ids + end + n_rest, in->copy + next,
	       (nc - next) * sizeof *in->copy);
	free(rest);
	out->pass = pass;
	out->copy_at_end = next;
	for (size_t p = w; p < end; p++) {
		out->hidden += skip[p] == 1;
		out->reasoning += skip[p] == 2;
	}
	rc = 0;
done:
	free(rows);
	free(skip);
	free(off);
	free(cb);
	free(disp);
	free(doff);
	free(W.soft);
	return rc;
}

void gw_align_out_fini(gw_align_out *out)
{
	free(out->ids);
	memset(out, 0, sizeof *out);
}
