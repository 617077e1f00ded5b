/* auth.c: who may call what, and the tenant's cache salt.
 *
 *   the admin token   --admin-token-file FILE (its first line) or the
 *                     MOOR_ADMIN_TOKEN environment variable; never needed
 *                     on the command line (--admin-token still works, but
 *                     it is warned about and its argv bytes are scrubbed
 *                     so that ps does not show them). It opens
 *                     /v1/cache/clear, /v1/cache/peek, /v1/cache/prewarm
 *                     and the session-naming parts of /v1/cache/stats.
 *                     With no token configured, clear is refused over HTTP
 *                     (moorctl clear on the admin socket does it), stats
 *                     report counts and bytes only, and peek and prewarm
 *                     are served to API-key holders only.
 *   API keys          --api-keys-file FILE: "KEY [TENANT]" a line (# and
 *                     blank lines skipped). When given, the inference
 *                     routes (/v1/chat/completions, /v1/completions,
 *                     /v1/models) and peek and prewarm need
 *                     "Authorization: Bearer KEY" (or the admin token);
 *                     anything else is 401 in OpenAI's error shape. Keys
 *                     of one TENANT share its caches; a key without one is
 *                     a tenant of its own.
 *   the cache salt    a request's caches are keyed by its tenant (the
 *                     key's salt) and the body's cache_salt (vLLM's name):
 *                     gw_salt() hashes the two into the 64-bit salt that
 *                     travels in GENERATE, PEEK and END_GET to cached,
 *                     which keys every tier by it (cached/salt.h). No key
 *                     and no cache_salt: salt 0, the caches as before.
 *
 * Tokens and keys are compared in time that depends on their lengths,
 * never on where the first difference is. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <xxhash.h>

#include "gw.h"

#define SALT_SEED 0x6d6f6f722d73616cull /* "moor-sal" */

/* Constant time in the secret's bytes. */
static int secret_eq(const char *want, size_t wl, const char *got, size_t gl)
{
	unsigned char d = gl != wl;
	for (size_t i = 0; i < wl; i++)
		d |= (unsigned char)want[i] ^
		     (unsigned char)(i < gl ? got[i] : 0);
	return d == 0;
}

/* The bearer token of req, or 0. */
static int bearer(h2o_req_t *req, const char **t, size_t *tl)
{
	const h2o_iovec_t *got = gw_header(req, "authorization");
	static const char pfx[] = "Bearer ";
	if (!got || got->len < sizeof pfx - 1 ||
	    strncasecmp(got->base, pfx, sizeof pfx - 1))
		return 0;
	*t = got->base + sizeof pfx - 1;
	*tl = got->len - (sizeof pfx - 1);
	return 1;
}

int gw_auth_admin(gw_srv *s, h2o_req_t *req)
{
	const char *t;
	size_t tl;
	if (!s->cfg.admin_token || !bearer(req, &t, &tl))
		return 0;
	return secret_eq(s->cfg.admin_token, strlen(s->cfg.admin_token), t,
			 tl);
}

int gw_auth_key(gw_srv *s, h2o_req_t *req, uint64_t *key_salt)
{
	*key_salt = 0;
	const char *t;
	size_t tl;
	if (!s->n_keys || !bearer(req, &t, &tl))
		return 0;
	int hit = -1;
	/* every key is compared: the time says nothing of which matched */
	for (uint32_t i = 0; i < s->n_keys; i++)
		if (secret_eq(s->keys[i].key, s->keys[i].len, t, tl))
			hit = (int)i;
	if (hit < 0)
		return 0;
	*key_salt = s->keys[hit].salt;
	return 1;
}

uint64_t gw_salt(uint64_t key_salt, const char *cache_salt, size_t len)
{
	if (!key_salt && !cache_salt)
		return PROTO_SALT_NONE;
	uint64_t h = XXH3_64bits_withSeed(cache_salt ? cache_salt : "",
					  cache_salt ? len : 0,
					  SALT_SEED ^ key_salt ^
					      (cache_salt ? 1 : 0));
	return h ? h : 1;
}

void gw_auth_refuse(gw_srv *s, h2o_req_t *req, int route, int admin)
{
	gw_metrics_count(s, route, 401);
	h2o_add_header(&req->pool, &req->res.headers,
		       H2O_TOKEN_WWW_AUTHENTICATE, NULL, H2O_STRLIT("Bearer"));
	if (admin)
		gw_send_error(req, 401, "invalid_request_error", NULL,
			      "invalid_api_key", 0,
			      "this route needs the admin token "
			      "(Authorization: Bearer <token>)");
	else
		gw_send_error(req, 401, "invalid_request_error", NULL,
			      "invalid_api_key", 0,
			      "Incorrect API key provided. This server needs "
			      "an API key (Authorization: Bearer <key>)");
}

/* ---- the files ---------------------------------------------------------- */

/* The file's bytes (at most max), NUL-terminated, malloc'd; warns when
 * others may read it. */
static char *slurp(const char *path, size_t max, const char *what, char *err)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		moor_errf(err, "%s %s: %s", what, path, strerror(errno));
		return NULL;
	}
	struct stat st;
	if (!fstat(fileno(f), &st) && (st.st_mode & 0077))
		moor_warn("%s %s: group or others may read it (mode %03o); "
			  "chmod 600 it",
			  what, path, (unsigned)(st.st_mode & 0777));
	char *b = malloc(max + 1);
	size_t n = b ? fread(b, 1, max + 1, f) : 0;
	int bad = ferror(f);
	fclose(f);
	if (!b || bad || n > max) {
		moor_errf(err, "%s %s: %s", what, path,
			  !b ? "out of memory"
			  : bad ? "read error"
				: "larger than the limit");
		free(b);
		return NULL;
	}
	b[n] = 0;
	return b;
}

int gw_auth_load(gw_srv *s, char *err)
{
	if (s->cfg.admin_token_file) {
		char *b = slurp(s->cfg.admin_token_file, 4096,
				"--admin-token-file", err);
		if (!b)
			return -EINVAL;
		b[strcspn(b, "\r\n")] = 0;
		size_t n = strlen(b);
		while (n && (b[n - 1] == ' ' || b[n - 1] == '\t'))
			b[--n] = 0;
		if (!n) {
			moor_errf(err, "--admin-token-file %s: the first line is "
				  "empty", s->cfg.admin_token_file);
			free(b);
			return -EINVAL;
		}
		s->admin_token_own = b;
		s->cfg.admin_token = b;
	}
	if (!s->cfg.api_keys_file)
		return 0;
	char *b = slurp(s->cfg.api_keys_file, 1u << 20, "--api-keys-file", err);
	if (!b)
		return -EINVAL;
	uint32_t cap = 0;
	int line = 0;
	for (char *p = b, *nl; p && *p; p = nl ? nl + 1 : NULL) {
		nl = strchr(p, '\n');
		if (nl)
			*nl = 0;
		line++;
		char *k = p + strspn(p, " \t\r");
		if (!*k || *k == '#')
			continue;
		size_t kl = strcspn(k, " \t\r");
		char *tn = k + kl;
		tn += strspn(tn, " \t\r");
		size_t tl = strcspn(tn, " \t\r");
		if (kl < 8 || kl > 512) {
			moor_errf(err,
				  "--api-keys-file %s:%d: a key must be 8 to "
				  "512 bytes",
				  s->cfg.api_keys_file, line);
			free(b);
			return -EINVAL;
		}
		if (s->n_keys == cap) {
			cap = cap ? cap * 2 : 16;
			gw_key *v = realloc(s->keys, cap * sizeof *v);
			if (!v) {
				free(b);
				moor_errf(err, "out of memory");
				return -ENOMEM;
			}
			s->keys = v;
		}
		gw_key *e = &s->keys[s->n_keys++];
		e->key = malloc(kl + 1);
		if (!e->key) {
			s->n_keys--;
			free(b);
			moor_errf(err, "out of memory");
			return -ENOMEM;
		}
		memcpy(e->key, k, kl);
		e->key[kl] = 0;
		e->len = kl;
		/* a tenant's salt from its name; a key alone, from the key */
		e->salt = tl ? XXH3_64bits_withSeed(tn, tl, SALT_SEED ^ 2)
			     : XXH3_64bits_withSeed(k, kl, SALT_SEED ^ 3);
		if (!e->salt)
			e->salt = 1;
	}
	free(b);
	if (!s->n_keys) {
		moor_errf(err, "--api-keys-file %s: no key in it",
			  s->cfg.api_keys_file);
		return -EINVAL;
	}
	moor_info("%u API keys: the inference routes need one", s->n_keys);
	return 0;
}

void gw_auth_free(gw_srv *s)
{
	for (uint32_t i = 0; i < s->n_keys; i++) {
		memset(s->keys[i].key, 0, s->keys[i].len);
		free(s->keys[i].key);
	}
	free(s->keys);
	s->keys = NULL;
	s->n_keys = 0;
	free(s->admin_token_own);
	s->admin_token_own = NULL;
}
