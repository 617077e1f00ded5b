/* test_gw_cross_site: what a browser page of another site can make a
 * browser send is refused (issue 13's code review):
 *   - a Host that is not an IP literal, localhost or an --allowed-hosts
 *     name (DNS rebinding: attacker.example resolving to 127.0.0.1) is
 *     403 host_not_allowed, on every route; 127.0.0.1:PORT, [::1]:PORT,
 *     localhost, an allowed name and a subdomain of an allowed ".suffix"
 *     are served;
 *   - a POST of text/plain, a form or multipart (the bodies a cross-site
 *     page sends without a CORS preflight) is 415 unsupported_media_type,
 *     even with a JSON body; application/json (with a charset) and no
 *     Content-Type at all are served. */
#include <stdlib.h>

#include "t.h"

#include "gwtest.h"
#include "harness.h"

/* A raw request with the given head lines (Host included): the status. */
static int raw(const char *head, const char *body, char *code, size_t n)
{
	int fd = gt_connect(gt_.port);
	REQUIRE(fd >= 0, "connect");
	char req[4096];
	int k = snprintf(req, sizeof req,
			 "%s\r\nConnection: close\r\nContent-Length: %zu\r\n"
			 "\r\n%s",
			 head, body ? strlen(body) : 0, body ? body : "");
	REQUIRE(write(fd, req, (size_t)k) == k, "write");
	char *b;
	size_t len;
	gt_read_all(fd, &b, &len, 30);
	close(fd);
	gt_resp r = {0};
	gt_parse(b, len, &r);
	json_t *o = gt_json(&r);
	const char *c = gt_str(o, "error.code");
	snprintf(code, n, "%s", c ? c : "");
	int st = r.status;
	json_decref(o);
	gt_resp_fini(&r);
	return st;
}

int main(int argc, char **argv)
{
	static const char *const extra[] = {
	    "--allowed-hosts", "moor.example,.lan.example", NULL};
	gt_stack(argc, argv, "gwxsite", 120, extra, NULL, NULL);
	char h[512], code[64];
	const char *chat = "{\"messages\":[{\"role\":\"user\",\"content\":"
			   "\"hi\"}],\"max_tokens\":1,\"temperature\":0}";
	static const char *const bad_hosts[] = {
	    "attacker.example", "attacker.example:8000", "moor.example.evil",
	    "lan.example", "localhost.attacker.example", "[attacker]:80"};
	for (size_t i = 0; i < sizeof bad_hosts / sizeof bad_hosts[0]; i++) {
		snprintf(h, sizeof h, "GET /v1/models HTTP/1.1\r\nHost: %s",
			 bad_hosts[i]);
		int st = raw(h, NULL, code, sizeof code);
		CHECK(st == 403 && !strcmp(code, "host_not_allowed"),
		      "Host %s: %d %s", bad_hosts[i], st, code);
		snprintf(h, sizeof h,
			 "POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\n"
			 "Content-Type: application/json",
			 bad_hosts[i]);
		st = raw(h, chat, code, sizeof code);
		CHECK(st == 403, "chat with Host %s: %d", bad_hosts[i], st);
	}
	char good[5][64];
	snprintf(good[0], 64, "127.0.0.1:%d", gt_.port);
	snprintf(good[1], 64, "[::1]:%d", gt_.port);
	snprintf(good[2], 64, "localhost:%d", gt_.port);
	snprintf(good[3], 64, "MOOR.example");
	snprintf(good[4], 64, "gpu.lan.example:%d", gt_.port);
	for (int i = 0; i < 5; i++) {
		snprintf(h, sizeof h, "GET /v1/models HTTP/1.1\r\nHost: %s",
			 good[i]);
		int st = raw(h, NULL, code, sizeof code);
		CHECK(st == 200, "Host %s: %d %s", good[i], st, code);
	}
	static const char *const simple[] = {
	    "text/plain", "text/plain;charset=UTF-8",
	    "application/x-www-form-urlencoded",
	    "multipart/form-data; boundary=x", "TEXT/PLAIN"};
	for (size_t i = 0; i < sizeof simple / sizeof simple[0]; i++) {
		snprintf(h, sizeof h,
			 "POST /v1/chat/completions HTTP/1.1\r\nHost: "
			 "127.0.0.1\r\nContent-Type: %s",
			 simple[i]);
		int st = raw(h, chat, code, sizeof code);
		CHECK(st == 415 && !strcmp(code, "unsupported_media_type"),
		      "a %s POST: %d %s", simple[i], st, code);
	}
	snprintf(h, sizeof h,
		 "POST /v1/cache/clear HTTP/1.1\r\nHost: 127.0.0.1\r\n"
		 "Authorization: Bearer " GT_ADMIN_TOKEN "\r\n"
		 "Content-Type: text/plain");
	CHECK(raw(h, "{}", code, sizeof code) == 415,
	      "a text/plain clear with the token");
	snprintf(h, sizeof h,
		 "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
		 "Content-Type: application/json; charset=utf-8");
	CHECK(raw(h, chat, code, sizeof code) == 200, "a JSON chat: %s", code);
	snprintf(h, sizeof h,
		 "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1");
	CHECK(raw(h, chat, code, sizeof code) == 200,
	      "a chat with no Content-Type: %s", code);
	return h_done("test_gw_cross_site");
}
