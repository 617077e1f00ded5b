/* test_gw_admin_tenants: the admin routes and the tenants (issue 13,
 * "Admin and tenants").
 *
 *   - /v1/cache/stats without the admin token: counts and bytes, no
 *     session id anywhere ("redacted": true); with it, the session;
 *   - clear and peek without the token: 401; with no token configured:
 *     403 whatever the request carries, stats still redacted;
 *   - cache_salt: a follow-up of another salt resumes nothing
 *     (cached_tokens 0) and neither does one without a salt; the same
 *     salt resumes its own parked conversation; a peek of another salt
 *     says 0 cached tokens;
 *   - --api-keys-file: the inference routes and /v1/models need a key
 *     (401 in OpenAI's shape, WWW-Authenticate), /health does not; two
 *     keys of one tenant share its caches, another tenant's key resumes
 *     nothing and peeks 0; --admin-token-file wins over the environment;
 *   - --admin-token on the command line: warned about, and its bytes are
 *     not in /proc/PID/cmdline. */
#include <fcntl.h>
#include <stdlib.h>

#include "t.h"

#include "gwtest.h"
#include "harness.h"

static char sys_text[8192];

/* turn 1 (turn2 = 0) or turn 2 of one conversation, extra body fields */
static char *conv_body(int turn2, const char *extra)
{
	json_t *t = json_pack("{s:[{s:s,s:s},{s:s,s:s}],s:i,s:i}", "messages",
			      "role", "system", "content", sys_text, "role",
			      "user", "content", "Hello!", "max_tokens", 3,
			      "temperature", 0);
	if (turn2) {
		json_t *m = json_object_get(t, "messages");
		json_array_append_new(m, json_pack("{s:s,s:s}", "role",
						   "assistant", "content",
						   "Hi there."));
		json_array_append_new(m, json_pack("{s:s,s:s}", "role", "user",
						   "content", "And then?"));
	}
	char *s = json_dumps(t, JSON_COMPACT);
	json_decref(t);
	if (extra && *extra) {
		size_t n = strlen(s);
		char *o = malloc(n + strlen(extra) + 4);
		s[n - 1] = 0;
		sprintf(o, "%s,%s}", s, extra);
		free(s);
		return o;
	}
	return s;
}

/* POST path at port with headers: the status, and the usage's cached
 * tokens (or a peek's cached_tokens) in *cached. */
static int post(int port, const char *path, const char *body,
		const char *hdrs, long long *cached)
{
	gt_resp r = gt_request(port, "POST", path, body, hdrs, 60);
	json_t *o = gt_json(&r);
	*cached = gt_int(o, !strcmp(path, "/v1/cache/peek")
				? "cached_tokens"
				: "usage.prompt_tokens_details.cached_tokens");
	int st = r.status;
	if (st != 200)
		printf("%s: %d %s\n", path, st, r.body);
	json_decref(o);
	gt_resp_fini(&r);
	return st;
}

static int has_key(const json_t *v, const char *key)
{
	if (json_is_object(v)) {
		const char *k;
		json_t *x;
		json_object_foreach((json_t *)v, k, x)
		{
			if (!strcmp(k, key) || has_key(x, key))
				return 1;
		}
	} else if (json_is_array(v)) {
		size_t i;
		json_t *x;
		json_array_foreach(v, i, x) if (has_key(x, key)) return 1;
	}
	return 0;
}

static void write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	REQUIRE(fd >= 0, "%s", path);
	REQUIRE(write(fd, text, strlen(text)) == (ssize_t)strlen(text), "%s",
		path);
	close(fd);
}

static void salts(int port)
{
	const char *S = "x-session-id: salted-conv\r\n";
	long long c;
	char *t1 = conv_body(0, "\"cache_salt\":\"tenant-one\"");
	REQUIRE(post(port, "/v1/chat/completions", t1, S, &c) == 200, "t1");
	CHECK(c == 0, "turn 1 of salt one resumed %lld tokens", c);
	/* another salt, then the same salt: the rows of salt one were parked
	 * by the other's turn and come back for their own follow-up */
	char *b2 = conv_body(1, "\"cache_salt\":\"tenant-two\"");
	REQUIRE(post(port, "/v1/chat/completions", b2, S, &c) == 200, "b2");
	CHECK(c == 0, "a follow-up of another salt resumed %lld tokens", c);
	char *a2 = conv_body(1, "\"cache_salt\":\"tenant-one\"");
	REQUIRE(post(port, "/v1/chat/completions", a2, S, &c) == 200, "a2");
	CHECK(c > 64, "the same salt's follow-up resumed only %lld tokens", c);
	printf("salt one's follow-up resumed %lld tokens\n", c);
	long long want = c;
	/* the peeks: a salt that never ran sees nothing (salt two has its
	 * own parked rows by now); the same salt its rows */
	long long pc;
	char *b3 = conv_body(1, "\"cache_salt\":\"tenant-three\"");
	REQUIRE(post(port, "/v1/cache/peek", b3, S, &pc) == 200, "peek b3");
	CHECK(pc == 0, "a peek of another salt says %lld cached", pc);
	free(b3);
	REQUIRE(post(port, "/v1/cache/peek", a2, S, &pc) == 200, "peek a2");
	CHECK(pc >= want, "a peek of the same salt says %lld (< %lld)", pc,
	      want);
	/* no salt at all is a tenant of its own too */
	char *u2 = conv_body(1, "");
	REQUIRE(post(port, "/v1/chat/completions", u2, S, &c) == 200, "u2");
	CHECK(c == 0, "an unsalted follow-up resumed %lld tokens", c);
	char *bad = conv_body(1, "\"cache_salt\":\"\"");
	gt_resp r = gt_post(port, "/v1/chat/completions", bad);
	json_t *o = gt_json(&r);
	CHECK(r.status == 400 && gt_str(o, "error.param") &&
		  !strcmp(gt_str(o, "error.param"), "cache_salt"),
	      "an empty cache_salt: %d %s", r.status, r.body);
	json_decref(o);
	gt_resp_fini(&r);
	free(t1);
	free(b2);
	free(a2);
	free(u2);
	free(bad);
}

static void stats_redacted(int port)
{
	gt_admin.off = 1;
	gt_resp r = gt_get(port, "/v1/cache/stats");
	json_t *o = gt_json(&r);
	CHECK(r.status == 200 && o, "stats without the token: %d", r.status);
	CHECK(!has_key(o, "session") && !strstr(r.body, "salted-conv") &&
		  json_is_true(json_object_get(o, "redacted")),
	      "stats without the token name a session: %s", r.body);
	CHECK(gt_int(o, "resident.bytes") > 0, "no bytes in redacted stats");
	json_decref(o);
	gt_resp_fini(&r);
	long long c;
	char *b = conv_body(1, "");
	CHECK(post(port, "/v1/cache/peek", b, NULL, &c) == 401,
	      "peek without the token");
	r = gt_request(port, "POST", "/v1/cache/clear", "{}", NULL, 10);
	CHECK(r.status == 401, "clear without the token: %d", r.status);
	gt_resp_fini(&r);
	gt_admin.off = 0;
	r = gt_get(port, "/v1/cache/stats");
	CHECK(r.status == 200 && strstr(r.body, "salted-conv") &&
		  !strstr(r.body, "redacted"),
	      "stats with the token: %d %s", r.status, r.body);
	gt_resp_fini(&r);
	free(b);
}

static void no_token(void)
{
	gt_admin.no_token = 1;
	int port;
	pid_t pid = gt_gatewayd(&port, NULL);
	gt_admin.no_token = 0;
	REQUIRE(gt_wait_health(port, 200, 20) == 200, "not green");
	/* gt_send still adds a bearer: no token configured refuses anyway */
	gt_resp r = gt_request(port, "POST", "/v1/cache/clear", "{}", NULL, 10);
	json_t *o = gt_json(&r);
	CHECK(r.status == 403 && gt_str(o, "error.code") &&
		  !strcmp(gt_str(o, "error.code"), "admin_token_not_configured"),
	      "clear with no token configured: %d %s", r.status, r.body);
	json_decref(o);
	gt_resp_fini(&r);
	long long c;
	char *b = conv_body(1, "");
	CHECK(post(port, "/v1/cache/peek", b, NULL, &c) == 403,
	      "peek with no token configured");
	r = gt_get(port, "/v1/cache/stats");
	CHECK(r.status == 200 && strstr(r.body, "\"redacted\":true") &&
		  !strstr(r.body, "\"session\""),
	      "stats with no token configured: %s", r.body);
	gt_resp_fini(&r);
	free(b);
	kill(pid, SIGTERM);
	h_wait_exit(pid, 10);
}

static void api_keys(void)
{
	char kf[300], af[300];
	snprintf(kf, sizeof kf, "%s/keys", gt_.run);
	snprintf(af, sizeof af, "%s/admin", gt_.run);
	write_file(kf, "# tenants\nkey-alpha-0001 alpha\n\n"
		       "key-alpha-0002 alpha\nkey-beta-000001\n"
		       "  key-gamma-00001   gamma \n");
	write_file(af, "file-admin-token\n");
	const char *extra[] = {"--api-keys-file", kf, "--admin-token-file", af,
			       NULL};
	int port;
	pid_t pid = gt_gatewayd(&port, extra);
	REQUIRE(gt_wait_health(port, 200, 20) == 200, "not green");
	const char *A1 = "Authorization: Bearer key-alpha-0001\r\n"
			 "x-session-id: keyed\r\n";
	const char *A2 = "Authorization: Bearer key-alpha-0002\r\n"
			 "x-session-id: keyed\r\n";
	const char *B = "Authorization: Bearer key-beta-000001\r\n"
			"x-session-id: keyed\r\n";
	char *t1 = conv_body(0, ""), *t2 = conv_body(1, "");
	/* refusals */
	gt_resp r = gt_request(port, "POST", "/v1/chat/completions", t1, NULL,
			       30);
	json_t *o = gt_json(&r);
	char wa[64] = "";
	CHECK(r.status == 401 && gt_str(o, "error.code") &&
		  !strcmp(gt_str(o, "error.code"), "invalid_api_key") &&
		  gt_str(o, "error.type") &&
		  !strcmp(gt_str(o, "error.type"), "invalid_request_error") &&
		  gt_header(&r, "www-authenticate", wa, sizeof wa) &&
		  !strncmp(wa, "Bearer", 6),
	      "a chat without a key: %d %s", r.status, r.body);
	json_decref(o);
	gt_resp_fini(&r);
	long long c;
	CHECK(post(port, "/v1/chat/completions", t1,
		   "Authorization: Bearer key-alpha-0003\r\n", &c) == 401,
	      "a wrong key");
	r = gt_request(port, "GET", "/v1/models", NULL, NULL, 10);
	CHECK(r.status == 401, "models without a key: %d", r.status);
	gt_resp_fini(&r);
	r = gt_request(port, "GET", "/v1/models", NULL,
		       "Authorization: Bearer key-beta-000001\r\n", 10);
	CHECK(r.status == 200, "models with a key: %d", r.status);
	gt_resp_fini(&r);
	r = gt_get(port, "/health");
	CHECK(r.status == 200, "health without a key: %d", r.status);
	gt_resp_fini(&r);
	/* tenants */
	REQUIRE(post(port, "/v1/chat/completions", t1, A1, &c) == 200, "A t1");
	REQUIRE(post(port, "/v1/chat/completions", t2, B, &c) == 200, "B t2");
	CHECK(c == 0, "another tenant's follow-up resumed %lld tokens", c);
	REQUIRE(post(port, "/v1/chat/completions", t2, A2, &c) == 200, "A t2");
	CHECK(c > 64, "a key of the same tenant resumed only %lld", c);
	const char *G = "Authorization: Bearer key-gamma-00001\r\n"
			"x-session-id: keyed\r\n";
	REQUIRE(post(port, "/v1/cache/peek", t2, G, &c) == 200, "peek G");
	CHECK(c == 0, "another tenant peeks %lld cached tokens", c);
	REQUIRE(post(port, "/v1/cache/peek", t2, A1, &c) == 200, "peek A");
	CHECK(c > 64, "the tenant peeks only %lld cached tokens", c);
	/* a key and a cache_salt: a salt of its own within the tenant */
	char *s2 = conv_body(1, "\"cache_salt\":\"inner\"");
	REQUIRE(post(port, "/v1/chat/completions", s2, A1, &c) == 200, "A s2");
	CHECK(c == 0, "a key with a cache_salt resumed %lld tokens", c);
	/* the admin token is the file's, not the environment's */
	r = gt_request(port, "POST", "/v1/cache/clear", "{}", NULL, 10);
	CHECK(r.status == 401, "clear with the environment's token: %d",
	      r.status);
	gt_resp_fini(&r);
	r = gt_request(port, "POST", "/v1/cache/clear", "{}",
		       "Authorization: Bearer file-admin-token\r\n", 10);
	CHECK(r.status == 200, "clear with the file's token: %d %s", r.status,
	      r.body);
	gt_resp_fini(&r);
	free(t1);
	free(t2);
	free(s2);
	kill(pid, SIGTERM);
	h_wait_exit(pid, 10);
}

static void token_in_argv(void)
{
	const char *extra[] = {"--admin-token", "cli-secret-4242", NULL};
	int port;
	pid_t pid = gt_gatewayd(&port, extra);
	REQUIRE(gt_wait_health(port, 200, 20) == 200, "not green");
	char p[64];
	snprintf(p, sizeof p, "/proc/%d/cmdline", (int)pid);
	int fd = open(p, O_RDONLY);
	char buf[4096];
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
	if (fd >= 0)
		close(fd);
	REQUIRE(n > 0, "%s", p);
	CHECK(!memmem(buf, (size_t)n, "cli-secret-4242", 15),
	      "the token is in %s", p);
	CHECK(memmem(buf, (size_t)n, "--admin-token", 13) != NULL,
	      "the flag is not in %s", p);
	char log[32];
	snprintf(log, sizeof log, "gatewayd%d", gt_.n_gw);
	CHECK(h_log_has(log, "visible to every user"),
	      "no warning about the token in argv");
	gt_resp r = gt_request(port, "POST", "/v1/cache/clear", "{}",
			       "Authorization: Bearer cli-secret-4242\r\n", 10);
	CHECK(r.status == 200, "clear with the argv token: %d", r.status);
	gt_resp_fini(&r);
	kill(pid, SIGTERM);
	h_wait_exit(pid, 10);
}

int main(int argc, char **argv)
{
	for (int i = 0; i < 30; i++)
		strcat(sys_text,
		       "You are a careful assistant who answers briefly. ");
	gt_stack(argc, argv, "gwadmin", 200, NULL, NULL, NULL);
	salts(gt_.port);
	stats_redacted(gt_.port);
	no_token();
	api_keys();
	token_in_argv();
	return h_done("test_gw_admin_tenants");
}
