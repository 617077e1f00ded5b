/* replies.c: cached's replies (daemon.h): OK, ERROR with a message that
 * names what was wrong, and what a message that did not decode is told. */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>
#include <nng/nng.h>

#include "cache.h"
#include "daemon.h"
#include "moor.h"
#include "net.h"
#include "proto.h"
#include "salt.h"
#include "util.h"

int cd_send(cd *d, int w, proto_msg *m)
{
	/* the engine may read what this request copied once it hears back
	 * (an error too: a plan that failed half way copied some) */
	if (w == SOCK_ENG) {
		int sr = cache_sync(d->c);
		if (sr && m->h.type != PROTO_ERROR) {
			proto_msg e = {0};
			e.h.type = PROTO_ERROR;
			e.h.req = m->h.req;
			e.u.error.code = sr;
			e.u.error.msg = "cached: the device copies of this "
					"request failed";
			moor_err("%s: %s", proto_type_name(m->h.type),
				 e.u.error.msg);
			m = &e;
			int rc = proto_send(d->sock[w], m,
					    (nng_pipe)NNG_PIPE_INITIALIZER);
			return rc ? rc : sr;
		}
	}
	int rc = proto_send(d->sock[w], m, (nng_pipe)NNG_PIPE_INITIALIZER);
	if (rc)
		moor_warn("%s: reply %s: %s", d->url[w],
			  proto_type_name(m->h.type), moor_strerror(rc));
	return rc;
}

void cd_reply_ok(cd *d, int w, uint64_t req)
{
	proto_msg m = {0};
	m.h.type = PROTO_OK;
	m.h.req = req;
	cd_send(d, w, &m);
}

void cd_reply_err(cd *d, int w, uint64_t req, int code, const char *fmt, ...)
{
	char text[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	d->n_errors++;
	moor_info("%s: refused: %s",
		  w == SOCK_ENG ? "cached.sock" : "admin.sock", text);
	proto_send_error(d->sock[w], (nng_pipe)NNG_PIPE_INITIALIZER, req, code,
			 "%s", text);
}

/* ---- a message that did not decode ---- */

static uint32_t rd32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static uint64_t rd64(const uint8_t *p)
{
	return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

/* Answers a message that did not decode, saying why. */
void cd_reply_bad(cd *d, int w, const uint8_t *b, size_t len, int rc)
{
	if (len > (size_t)PROTO_HDR_SIZE + PROTO_MAX_PAYLOAD) {
		cd_reply_err(d, w, rd64(b + 16), MOOR_EFORMAT,
			     "oversized message: %zu bytes, the limit is %u",
			     len, PROTO_HDR_SIZE + PROTO_MAX_PAYLOAD);
		return;
	}
	if (len < PROTO_HDR_SIZE) {
		cd_reply_err(d, w, 0, MOOR_EFORMAT,
			     "truncated message: %zu bytes, shorter than the "
			     "%d-byte header",
			     len, PROTO_HDR_SIZE);
		return;
	}
	uint32_t magic = rd32(b), plen = rd32(b + 8);
	uint16_t version = (uint16_t)(b[4] | b[5] << 8);
	uint16_t type = (uint16_t)(b[6] | b[7] << 8);
	uint64_t req = rd64(b + 16);
	if (magic != PROTO_MAGIC)
		cd_reply_err(d, w, req, MOOR_EFORMAT,
			     "bad magic 0x%08x: not a moor message", magic);
	else if (version != PROTO_VERSION)
		cd_reply_err(
		    d, w, req, MOOR_EVERSION,
		    "protocol version %u; this cached speaks version %d",
		    version, PROTO_VERSION);
	else if (plen > PROTO_MAX_PAYLOAD)
		cd_reply_err(
		    d, w, req, MOOR_EFORMAT,
		    "oversized message: a %u-byte payload, the limit is "
		    "%u",
		    plen, PROTO_MAX_PAYLOAD);
	else if ((size_t)plen != len - PROTO_HDR_SIZE)
		cd_reply_err(
		    d, w, req, MOOR_EFORMAT,
		    "truncated message: the header says %u payload bytes, "
		    "%zu came",
		    plen, len - PROTO_HDR_SIZE);
	else if (!strcmp(proto_type_name(type), "unknown"))
		cd_reply_err(d, w, req, MOOR_EFORMAT, "unknown message type %u",
			     type);
	else
		cd_reply_err(
		    d, w, req, rc == MOOR_EVERSION ? rc : MOOR_EFORMAT,
		    "malformed %s payload (%u bytes): a field runs past "
		    "the payload, a count or string is over its limit, "
		    "or bytes are left after the last field",
		    proto_type_name(type), plen);
}
