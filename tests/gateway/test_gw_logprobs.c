/* test_gw_logprobs: logprobs end to end, cached + engined on models/tiny +
 * gatewayd, greedy (temperature 0) throughout.
 *
 * A chat with logprobs and top_logprobs 5: choices[0].logprobs is
 * {"content": [...], "refusal": null}, an entry a token, its logprob, its
 * bytes and its top_logprobs, and an entry's token is its bytes as text
 * (U+FFFD where they are not UTF-8 alone); every logprob is <= 0; the top
 * list has the asked length, is non-increasing, and the sum of exp over it
 * is at most 1 + 1e-5 (they are fp32 log-softmax values of distinct
 * tokens: the exact sum is at most 1, and each exp of a rounded fp32
 * logprob is off by a few parts in 10^7, twenty of them a few 10^-6 at
 * most); greedy picks the lowest id among the maxima and engined orders
 * ties by id, so the sampled token is the top list's first with the same
 * logprob and bytes; the entries are completion_tokens, less the token
 * that stopped the generation when it ended on one. The same chat
 * streamed: every chunk's logprobs but the role's is an object, and their
 * lists concatenated equal the whole reply's exactly (JSON values). A chat
 * with logprobs and no top_logprobs: [] tops.
 *
 * A completion with logprobs 3: tokens, token_logprobs, top_logprobs and
 * text_offset of one length, that same count; each dict holds the sampled
 * token with its token_logprob, at most 4 keys, 3 for greedy (the sampled
 * token is the likeliest) unless two ids decode to one U+FFFD key, the
 * sampled token's logprob the largest; text_offset starts at 0, each
 * token's text is the text at its offset (in characters), and the tokens
 * concatenated are the text where none is U+FFFD. Streamed: the same
 * lists. logprobs 0: the sampled token alone in each dict.
 *
 * The chat's prompt sent as a completion's string (the qwen3 template's
 * rendering, checked by its prompt_tokens): the same greedy tokens, so
 * the completion's tokens and token_logprobs are the chat's entries, the
 * chat entries' bytes concatenated are the completion text's bytes, and
 * text_offset is the characters those bytes complete before each token.
 *
 * A stop string that is the text of the completion's token k (its first
 * occurrence): the entries are tokens 0..k, the one where the match
 * completed included and none after it, whole and streamed.
 *
 * Without logprobs: "logprobs": null in the whole reply and in every
 * chunk, for a chat and a completion.
 *
 * Reasoning (a second gateway of the Qwen3.8 template, whose prompt opens
 * <think>, and a reasoning budget of 8): the reasoning's tokens have
 * entries, the budget's visible close "</think>" among them and its
 * hidden phrase not; the count holds (completion_tokens does not count
 * the hidden tokens either); streamed equal to whole.
 *
 * The values are engined's (STEP's logprobs, proto 6); the shapes are
 * checked before them, so an engine that sent none (logprob 0, no top
 * list) fails on the top lists' lengths and the greedy checks alone.
 *
 *   test_gw_logprobs CACHED ENGINED GATEWAYD MODEL_DIR
 */
#include <math.h>

#include "t.h"

#include "gwtest.h"
#include "harness.h"

static int port;

#define FFFD "\xef\xbf\xbd"
#define CHAT_USER "Tell me a story."
/* what the qwen3 template renders for one user message */
#define CHAT_PROMPT                                                            \
	"<|im_start|>user\n" CHAT_USER "<|im_end|>\n<|im_start|>assistant\n"

/* ---- helpers ------------------------------------------------------------ */

static json_t *post_whole(const char *path, const char *body)
{
	return gt_post_whole(port, path, body);
}

static json_t *post_stream(const char *path, const char *body)
{
	return gt_post_stream(port, path, body);
}

static const json_t *lp_of(const json_t *o)
{
	return json_object_get(gt_choice0(o), "logprobs");
}

static int is_num(const json_t *v)
{
	return json_is_real(v) || json_is_integer(v);
}

static double num(const json_t *v)
{
	return json_number_value(v);
}

/* Whether s[0, n) is UTF-8 (no overlong form, surrogate or past
 * U+10FFFF). */
static int utf8_ok(const unsigned char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		unsigned c = s[i];
		size_t k;
		if (c < 0x80)
			k = 0;
		else if (c >= 0xc2 && c < 0xe0)
			k = 1;
		else if (c >= 0xe0 && c < 0xf0)
			k = 2;
		else if (c >= 0xf0 && c < 0xf5)
			k = 3;
		else
			return 0;
		if (k > n - 1 - i)
			return 0;
		unsigned lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80;
		unsigned hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
		for (size_t j = 1; j <= k; j++) {
			unsigned b = s[i + j];
			if (b < (j == 1 ? lo : 0x80) ||
			    b > (j == 1 ? hi : 0xbf))
				return 0;
		}
		i += k + 1;
	}
	return 1;
}

/* The characters of UTF-8 text s[0, n) (its lead bytes). */
static size_t chars(const char *s, size_t n)
{
	size_t c = 0;
	for (size_t i = 0; i < n; i++)
		c += ((unsigned char)s[i] & 0xc0) != 0x80;
	return c;
}

/* The byte where character k of s starts (n past the end). */
static size_t byte_at(const char *s, size_t n, size_t k)
{
	size_t i = 0;
	for (size_t c = 0; i < n; i++)
		if (((unsigned char)s[i] & 0xc0) != 0x80 && c++ == k)
			return i;
	return n;
}

/* The characters whose bytes are all in b[0, n) (a prefix of UTF-8
 * text: its last character may be cut). */
static size_t complete_chars(const unsigned char *b, size_t n)
{
	size_t c = chars((const char *)b, n), s = n;
	while (s > 0 && (b[s - 1] & 0xc0) == 0x80)
		s--;
	if (s == 0)
		return c;
	unsigned lead = b[s - 1];
	size_t need = lead >= 0xf0   ? 4
		      : lead >= 0xe0 ? 3
		      : lead >= 0xc0 ? 2
				     : 1;
	return n - (s - 1) < need ? c - 1 : c;
}

/* An entry's bytes into b (n so far; cap bytes); -1 when not bytes. */
static int bytes_into(const json_t *by, unsigned char *b, size_t *n, size_t cap)
{
	if (!json_is_array(by))
		return -1;
	for (size_t i = 0; i < json_array_size(by); i++) {
		const json_t *v = json_array_get(by, i);
		if (!json_is_integer(v) || json_integer_value(v) < 0 ||
		    json_integer_value(v) > 255 || *n >= cap)
			return -1;
		b[(*n)++] = (unsigned char)json_integer_value(v);
	}
	return 0;
}

/* One {token, logprob, bytes} of a chat entry or its top list. */
static int check_tok(const json_t *e, const char *what, size_t i)
{
	const json_t *t = json_object_get(e, "token"),
		     *l = json_object_get(e, "logprob"),
		     *by = json_object_get(e, "bytes");
	unsigned char b[512];
	size_t n = 0;
	int ok = json_is_string(t) && is_num(l) && !bytes_into(by, b, &n, 512);
	CHECK(ok, "%s %zu: not {token, logprob, bytes}", what, i);
	if (!ok)
		return 0;
	CHECK(num(l) <= 0 && num(l) >= -9999.0, "%s %zu: logprob %.17g", what,
	      i, num(l));
	CHECK(n > 0, "%s %zu: no bytes", what, i);
	if (utf8_ok(b, n))
		CHECK(json_string_length(t) == n &&
			  !memcmp(json_string_value(t), b, n),
		      "%s %zu: token '%s' is not its bytes", what, i,
		      json_string_value(t));
	else
		CHECK(strstr(json_string_value(t), FFFD),
		      "%s %zu: bytes that are not UTF-8 alone, token '%s' "
		      "without U+FFFD",
		      what, i, json_string_value(t));
	return 1;
}

/* The reasoning budget's visible close (gatewayd's GW_CLOSE_VISIBLE), the
 * tokens engined forwards rather than samples. */
#define CLOSE_VISIBLE "</think>\n\n"
#define NO_CLOSE ((size_t)-1)

/* A chat's choices[0] with logprobs (top asked, greedy): its content list,
 * checked; finish and usage give the count. close_at: the entry where the
 * budget's forwarded close begins (its tokens are not the greedy pick:
 * the sampled-first check skips them), NO_CLOSE: none. */
static const json_t *check_chat(const json_t *o, size_t top, size_t close_at)
{
	const json_t *lp = lp_of(o);
	REQUIRE(json_is_object(lp), "chat logprobs not an object");
	const json_t *c = json_object_get(lp, "content");
	REQUIRE(json_is_array(c), "logprobs.content not an array");
	CHECK(json_object_get(lp, "refusal") &&
		  json_is_null(json_object_get(lp, "refusal")),
	      "logprobs.refusal not null");
	long long ct = gt_int(o, "usage.completion_tokens");
	const char *fin = gt_str(o, "choices.0.finish_reason");
	int on_stop = fin && !strcmp(fin, "stop");
	printf("chat: %zu entries, %lld completion tokens, finish %s\n",
	       json_array_size(c), ct, fin ? fin : "?");
	CHECK((long long)json_array_size(c) == ct - on_stop,
	      "%zu entries, completion_tokens %lld, finish %s",
	      json_array_size(c), ct, fin);
	size_t close_end = close_at;
	if (close_at != NO_CLOSE) {
		char acc[64] = "";
		for (; close_end < json_array_size(c) &&
		       strlen(acc) < strlen(CLOSE_VISIBLE);
		     close_end++) {
			const char *t =
			    gt_str(json_array_get(c, close_end), "token");
			if (!t || strlen(acc) + strlen(t) >= sizeof acc)
				break;
			strcat(acc, t);
		}
		CHECK(!strcmp(acc, CLOSE_VISIBLE),
		      "entries from %zu are not the budget's close: '%s'",
		      close_at, acc);
	}
	for (size_t i = 0; i < json_array_size(c); i++) {
		const json_t *e = json_array_get(c, i);
		CHECK(json_object_size(e) == 4, "entry %zu: %zu keys", i,
		      json_object_size(e));
		if (!check_tok(e, "entry", i))
			continue;
		const json_t *tl = json_object_get(e, "top_logprobs");
		REQUIRE(json_is_array(tl), "entry %zu: top_logprobs", i);
		CHECK(json_array_size(tl) == top,
		      "entry %zu: %zu top_logprobs, asked %zu", i,
		      json_array_size(tl), top);
		double sum = 0, prev = 0;
		for (size_t k = 0; k < json_array_size(tl); k++) {
			const json_t *a = json_array_get(tl, k);
			CHECK(json_object_size(a) == 3, "top %zu.%zu: keys", i,
			      k);
			if (!check_tok(a, "top", k))
				continue;
			double x = num(json_object_get(a, "logprob"));
			CHECK(k == 0 || x <= prev,
			      "entry %zu: top %zu's %.9g after %.9g", i, k, x,
			      prev);
			prev = x;
			sum += exp(x);
		}
		CHECK(sum <= 1 + 1e-5, "entry %zu: the top list sums to %.9g",
		      i, sum);
		/* greedy: the likeliest, the lowest id of the maxima, is
		 * the first of the top list */
		if (top && !(i >= close_at && i < close_end)) {
			const json_t *f = json_array_get(tl, 0);
			CHECK(json_equal(json_object_get(e, "token"),
					 json_object_get(f, "token")) &&
				  json_equal(json_object_get(e, "bytes"),
					     json_object_get(f, "bytes")) &&
				  num(json_object_get(e, "logprob")) ==
				      num(json_object_get(f, "logprob")),
			      "entry %zu: greedy '%s' %.9g is not the top "
			      "list's first '%s' %.9g",
			      i, gt_str(e, "token"),
			      num(json_object_get(e, "logprob")),
			      gt_str(f, "token"),
			      num(json_object_get(f, "logprob")));
		}
	}
	return c;
}

/* A completion's logprobs (n asked, greedy): checked against its text;
 * the lists' length is returned. */
static size_t check_completion(const json_t *o, size_t n_top)
{
	const json_t *lp = lp_of(o);
	REQUIRE(json_is_object(lp), "completion logprobs not an object");
	const json_t *tk = json_object_get(lp, "tokens"),
		     *tl = json_object_get(lp, "token_logprobs"),
		     *tp = json_object_get(lp, "top_logprobs"),
		     *to = json_object_get(lp, "text_offset");
	REQUIRE(json_is_array(tk) && json_is_array(tl) && json_is_array(tp) &&
		    json_is_array(to),
		"tokens, token_logprobs, top_logprobs, text_offset");
	size_t n = json_array_size(tk);
	CHECK(json_array_size(tl) == n && json_array_size(tp) == n &&
		  json_array_size(to) == n,
	      "lengths %zu %zu %zu %zu", n, json_array_size(tl),
	      json_array_size(tp), json_array_size(to));
	const char *text = gt_str(o, "choices.0.text");
	REQUIRE(text, "no text");
	size_t tlen = strlen(text);
	size_t total = chars(text, tlen);
	int any_fffd = 0;
	for (size_t i = 0; i < n; i++) {
		const char *t = json_string_value(json_array_get(tk, i));
		const json_t *l = json_array_get(tl, i),
			     *d = json_array_get(tp, i),
			     *off = json_array_get(to, i);
		REQUIRE(t && is_num(l) && json_is_object(d) &&
			    json_is_integer(off),
			"entry %zu's types", i);
		CHECK(num(l) <= 0 && num(l) >= -9999.0, "token_logprob %zu %g",
		      i, num(l));
		/* the sampled token's key holds its logprob; greedy: the
		 * largest of the dict */
		const json_t *mine = json_object_get(d, t);
		CHECK(mine && num(mine) == num(l),
		      "dict %zu lacks the sampled '%s' at %g", i, t, num(l));
		int fffd_key = 0;
		double sum = 0;
		const char *k;
		json_t *v;
		json_object_foreach((json_t *)d, k, v)
		{
			CHECK(is_num(v) && num(v) <= 0, "dict %zu[%s]", i, k);
			CHECK(num(v) <= num(l),
			      "dict %zu: '%s' %.9g above the "
			      "greedy token's %.9g",
			      i, k, num(v), num(l));
			fffd_key |= strstr(k, FFFD) != NULL;
			sum += exp(num(v));
		}
		CHECK(sum <= 1 + 1e-5, "dict %zu sums to %.9g", i, sum);
		CHECK(json_object_size(d) <= n_top + 1 &&
			  (fffd_key ||
			   json_object_size(d) == (n_top ? n_top : 1)),
		      "dict %zu: %zu keys for logprobs %zu", i,
		      json_object_size(d), n_top);
		/* text_offset: the token's text is the text there */
		long long at = json_integer_value(off);
		CHECK(i || at == 0, "text_offset[0] %lld", at);
		CHECK(!i || at >= json_integer_value(json_array_get(to, i - 1)),
		      "text_offset %zu goes back", i);
		CHECK(at >= 0 && (size_t)at <= total,
		      "text_offset %zu: %lld of "
		      "%zu characters",
		      i, at, total);
		if (strstr(t, FFFD)) {
			any_fffd = 1;
			continue;
		}
		size_t b = byte_at(text, tlen, (size_t)at);
		CHECK(!strncmp(text + b, t, strlen(t)),
		      "token %zu '%s' is not the text at character %lld", i, t,
		      at);
	}
	if (!any_fffd) {
		char cat[8192] = "";
		size_t cl = 0;
		for (size_t i = 0; i < n; i++) {
			const char *t =
			    json_string_value(json_array_get(tk, i));
			size_t k = t ? strlen(t) : 0;
			if (cl + k < sizeof cat) {
				memcpy(cat + cl, t, k);
				cl += k;
			}
		}
		cat[cl] = 0;
		CHECK(!strcmp(cat, text),
		      "the tokens '%s' are not the text '%s'", cat, text);
	}
	return n;
}

/* The chunks' logprobs concatenated into one object of the whole
 * reply's shape (chat: content; completion: the four lists); checks that
 * every chunk but a chat's role chunk and the usage chunk carries an
 * object. */
static json_t *stream_logprobs(const json_t *ev, int chat)
{
	static const char *const lists[] = {"tokens", "token_logprobs",
					    "top_logprobs", "text_offset"};
	json_t *all = json_object();
	if (chat) {
		json_object_set_new(all, "content", json_array());
		json_object_set_new(all, "refusal", json_null());
	} else {
		for (int k = 0; k < 4; k++)
			json_object_set_new(all, lists[k], json_array());
	}
	for (size_t i = 0; i < json_array_size(ev); i++) {
		const json_t *ch = gt_choice0(json_array_get(ev, i));
		if (!ch)
			continue; /* the usage chunk */
		const json_t *lp = json_object_get(ch, "logprobs");
		if (chat && gt_str(ch, "delta.role")) {
			CHECK(lp && json_is_null(lp),
			      "the role chunk carries logprobs");
			continue;
		}
		CHECK(json_is_object(lp), "chunk %zu: logprobs not an object",
		      i);
		if (!json_is_object(lp))
			continue;
		if (chat) {
			CHECK(json_is_null(json_object_get(lp, "refusal")),
			      "chunk %zu: refusal", i);
			json_array_extend(json_object_get(all, "content"),
					  json_object_get(lp, "content"));
		} else {
			for (int k = 0; k < 4; k++)
				json_array_extend(
				    json_object_get(all, lists[k]),
				    json_object_get(lp, lists[k]));
		}
	}
	return all;
}

/* Every choice of a whole reply or stream says "logprobs": null. */
static void check_null(const json_t *o, const char *what)
{
	const json_t *lp = lp_of(o);
	CHECK(lp && json_is_null(lp), "%s: logprobs not null", what);
}

static void check_null_stream(const json_t *ev, const char *what)
{
	for (size_t i = 0; i < json_array_size(ev); i++) {
		const json_t *ch = gt_choice0(json_array_get(ev, i));
		if (!ch)
			continue;
		const json_t *lp = json_object_get(ch, "logprobs");
		CHECK(lp && json_is_null(lp), "%s: chunk %zu logprobs not null",
		      what, i);
	}
}

/* ---- the cases --------------------------------------------------------- */

/* body streamed: its chunks' logprobs, concatenated, equal whole (the
 * non-streamed reply's logprobs) exactly */
static void check_streamed(const char *path, const char *body, int chat,
			   const json_t *whole, const char *what)
{
	char *sb = gt_with(body, "\"stream\":true");
	json_t *ev = post_stream(path, sb);
	json_t *sl = stream_logprobs(ev, chat);
	CHECK(json_equal(sl, whole),
	      "%s: streamed logprobs differ from the whole reply's", what);
	json_decref(sl);
	json_decref(ev);
	free(sb);
}

static const char *const C = "/v1/chat/completions", *const T =
							 "/v1/completions";

int main(int argc, char **argv)
{
	gt_stack(argc, argv, "gwlogprobs", 300, NULL, NULL, NULL);
	port = gt_.port;

	/* ---- chat, top_logprobs 5, whole and streamed ---- */
	char *cb =
	    gt_chat_body(CHAT_USER, 24, "\"logprobs\":true,\"top_logprobs\":5");
	json_t *chat = post_whole(C, cb);
	const json_t *content = check_chat(chat, 5, NO_CLOSE);
	check_streamed(C, cb, 1, lp_of(chat), "chat");
	free(cb);

	/* logprobs without top_logprobs: empty top lists */
	cb = gt_chat_body(CHAT_USER, 8, "\"logprobs\":true");
	json_t *o = post_whole(C, cb);
	check_chat(o, 0, NO_CLOSE);
	json_decref(o);
	free(cb);

	/* ---- a completion, logprobs 3, whole and streamed ---- */
	/* a prompt the tiny model does not end at once (greedy: 16 tokens
	 * of many scripts, here) */
	const char *tb = "{\"prompt\":\"The capital of France is\","
			 "\"max_tokens\":16,\"temperature\":0,\"logprobs\":3}";
	json_t *cmpl = post_whole(T, tb);
	size_t n = check_completion(cmpl, 3);
	const char *fin = gt_str(cmpl, "choices.0.finish_reason");
	long long ct = gt_int(cmpl, "usage.completion_tokens");
	printf("completion: %zu entries, %lld completion tokens, finish %s, "
	       "text '%s'\n",
	       n, ct, fin ? fin : "?", gt_str(cmpl, "choices.0.text"));
	CHECK((long long)n == ct - (fin && !strcmp(fin, "stop")),
	      "%zu entries, completion_tokens %lld, finish %s", n, ct, fin);
	check_streamed(T, tb, 0, lp_of(cmpl), "completion");

	/* logprobs 0: the sampled token alone */
	o = post_whole(T, "{\"prompt\":\"The capital of France is\","
			  "\"max_tokens\":8,\"temperature\":0,\"logprobs\":0}");
	check_completion(o, 0);
	json_decref(o);

	/* ---- the chat's prompt as a completion: the same tokens ---- */
	json_t *xb =
	    json_pack("{s:s,s:i,s:i,s:i}", "prompt", CHAT_PROMPT, "max_tokens",
		      24, "temperature", 0, "logprobs", 5);
	char *xs = json_dumps(xb, JSON_COMPACT);
	json_decref(xb);
	json_t *x = post_whole(T, xs);
	free(xs);
	CHECK(gt_int(x, "usage.prompt_tokens") ==
		  gt_int(chat, "usage.prompt_tokens"),
	      "the chat's prompt as a string: %lld tokens, the chat %lld "
	      "(the template's rendering changed?)",
	      gt_int(x, "usage.prompt_tokens"),
	      gt_int(chat, "usage.prompt_tokens"));
	size_t nx = check_completion(x, 5);
	const json_t *xlp = lp_of(x);
	CHECK(nx == json_array_size(content), "%zu entries vs the chat's %zu",
	      nx, json_array_size(content));
	unsigned char cat[16384];
	size_t cl = 0, offs[512];
	for (size_t i = 0; i < nx && i < json_array_size(content) && i < 512;
	     i++) {
		const json_t *e = json_array_get(content, i);
		CHECK(json_equal(
			  json_object_get(e, "token"),
			  json_array_get(json_object_get(xlp, "tokens"), i)) &&
			  num(json_object_get(e, "logprob")) ==
			      num(json_array_get(
				  json_object_get(xlp, "token_logprobs"), i)),
		      "token %zu: the chat's '%s' vs the completion's", i,
		      gt_str(e, "token"));
		/* text_offset: the characters the bytes before the token
		 * complete (one that starts inside a character: that
		 * character's offset) */
		offs[i] = complete_chars(cat, cl);
		bytes_into(json_object_get(e, "bytes"), cat, &cl, sizeof cat);
	}
	const char *xt = gt_str(x, "choices.0.text");
	if (utf8_ok(cat, cl)) {
		CHECK(xt && strlen(xt) == cl && !memcmp(xt, cat, cl),
		      "the chat entries' bytes (%zu) are not the completion "
		      "text's (%zu)",
		      cl, xt ? strlen(xt) : 0);
		for (size_t i = 0; i < nx && i < 512; i++) {
			long long off = json_integer_value(json_array_get(
			    json_object_get(xlp, "text_offset"), i));
			CHECK(off == (long long)offs[i],
			      "text_offset %zu: %lld, the bytes before it "
			      "complete %zu characters",
			      i, off, offs[i]);
		}
	} else {
		/* the model's bytes are not UTF-8 as a whole: the text has
		 * U+FFFD where they are not (the reply's decoder) */
		printf("the generated bytes are not UTF-8: the text has "
		       "U+FFFD\n");
		CHECK(xt && strstr(xt, FFFD), "bytes not UTF-8, text '%s'", xt);
	}
	json_decref(x);

	/* ---- a stop string: the token where it matched, none after ---- */
	const json_t *ctk = json_object_get(lp_of(cmpl), "tokens");
	const char *text = gt_str(cmpl, "choices.0.text");
	size_t k = n;
	size_t stop_at = 0;
	for (size_t i = n / 2, tries = 0; tries < n; tries++, i = (i + 1) % n) {
		const char *t = json_string_value(json_array_get(ctk, i));
		long long off = json_integer_value(json_array_get(
		    json_object_get(lp_of(cmpl), "text_offset"), i));
		if (!t || !*t || strstr(t, FFFD))
			continue;
		size_t b = byte_at(text, strlen(text), (size_t)off);
		const char *first = strstr(text, t);
		if (first && (size_t)(first - text) == b) {
			k = i;
			stop_at = b;
			break;
		}
	}
	REQUIRE(k < n, "no token of '%s' makes a stop string", text);
	const char *stop = json_string_value(json_array_get(ctk, k));
	printf("stop string '%s': token %zu of %zu\n", stop, k, n);
	json_t *pb = json_pack("{s:s,s:i,s:i,s:i,s:[s]}", "prompt",
			       "The capital of France is", "max_tokens", 16,
			       "temperature", 0, "logprobs", 3, "stop", stop);
	char *ps = json_dumps(pb, JSON_COMPACT);
	json_decref(pb);
	json_t *st = post_whole(T, ps);
	const char *stext = gt_str(st, "choices.0.text");
	CHECK(stext && strlen(stext) == stop_at &&
		  !strncmp(stext, text, stop_at),
	      "stop '%s': text '%s'", stop, stext);
	const json_t *slp = lp_of(st);
	size_t ns = json_array_size(json_object_get(slp, "tokens"));
	CHECK(ns == k + 1, "stop at token %zu: %zu entries, want %zu", k, ns,
	      k + 1);
	static const char *const lists[] = {"tokens", "token_logprobs",
					    "top_logprobs", "text_offset"};
	for (int l = 0; l < 4; l++)
		for (size_t i = 0; i < ns && i <= k; i++)
			CHECK(
			    json_equal(
				json_array_get(json_object_get(slp, lists[l]),
					       i),
				json_array_get(
				    json_object_get(lp_of(cmpl), lists[l]), i)),
			    "stop: %s[%zu] differs from the run without",
			    lists[l], i);
	check_streamed(T, ps, 0, slp, "stop");
	free(ps);
	json_decref(st);

	/* ---- without logprobs: null ---- */
	cb = gt_chat_body(CHAT_USER, 4, "");
	o = post_whole(C, cb);
	check_null(o, "chat");
	json_decref(o);
	char *sb = gt_with(cb, "\"stream\":true");
	json_t *ev = post_stream(C, sb);
	check_null_stream(ev, "chat stream");
	json_decref(ev);
	free(sb);
	free(cb);
	tb = "{\"prompt\":\"The capital of France is\",\"max_tokens\":4,"
	     "\"temperature\":0}";
	o = post_whole(T, tb);
	check_null(o, "completion");
	json_decref(o);
	sb = gt_with(tb, "\"stream\":true");
	ev = post_stream(T, sb);
	check_null_stream(ev, "completion stream");
	json_decref(ev);
	free(sb);

	/* ---- reasoning: its tokens have entries too, the budget's
	 * forwarded close (its visible part) included, its hidden phrase
	 * not (engined never streams it, completion_tokens does not count
	 * it) ---- */
	static const char *const q38[] = {"--chat-template", "qwen3.8", NULL};
	int port1 = port;
	gt_gatewayd(&port, q38);
	REQUIRE(gt_wait_health(port, 200, 20) == 200, "gatewayd2 not green");
	/* (a prompt whose greedy reasoning runs past 8 tokens) */
	cb = gt_chat_body("Tell me about tides.", 48,
			  "\"reasoning_budget\":8,\"logprobs\":true,"
			  "\"top_logprobs\":2");
	o = post_whole(C, cb);
	/* 8 reasoning tokens, then the close */
	const json_t *rc = check_chat(o, 2, 8);
	const char *rs = gt_str(o, "choices.0.message.reasoning_content");
	CHECK(rs && *rs, "no reasoning_content");
	unsigned char rb[16384];
	size_t rl = 0;
	for (size_t i = 0; i < json_array_size(rc); i++)
		bytes_into(json_object_get(json_array_get(rc, i), "bytes"), rb,
			   &rl, sizeof rb - 1);
	rb[rl] = 0;
	CHECK(strstr((char *)rb, "</think>") &&
		  !strstr((char *)rb, "Considering the limited time"),
	      "the entries' text: '%s'", (char *)rb);
	CHECK(h_log_has("engined1", "the reasoning budget (8) closed"),
	      "the budget did not close the reasoning (engined's log)");
	check_streamed(C, cb, 1, lp_of(o), "reasoning");
	free(cb);
	json_decref(o);
	port = port1;

	json_decref(cmpl);
	json_decref(chat);
	return h_done("test_gw_logprobs");
}
