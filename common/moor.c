/* moor.c: errors, assertions, logging and small conversions of moor.h. */
#include "moor.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int moor_log_level = MOOR_LOG_INFO;
static const char *log_name = "moor";

static const char *const proj_msgs[] = {
	[0] = "unknown moor error",
	[1] = "malformed file or message",
	[2] = "tensor has the wrong shape",
	[3] = "unsupported dtype",
	[4] = "required tensor or field missing",
	[5] = "unsupported model or feature",
	[6] = "argument out of range",
	[7] = "file truncated",
	[8] = "peer or file of another version",
	[9] = "no space in arena or budget",
	[10] = "compute backend failure",
};

const char *moor_strerror(int err)
{
	if (err == 0)
		return "success";
	if (err < MOOR_EBASE && err > MOOR_ELAST) {
		int i = MOOR_EBASE - err;
		if (i > 0 && i < (int)(sizeof proj_msgs / sizeof proj_msgs[0]))
			return proj_msgs[i];
		return proj_msgs[0];
	}
	if (err < 0 && err > MOOR_EBASE)
		return strerror(-err);
	return proj_msgs[0];
}

void moor_assert_fail(const char *expr, const char *file, int line)
{
	fprintf(stderr, "%s: assertion failed: %s (%s:%d)\n", log_name, expr,
		file, line);
	abort();
}

void moor_log_set_name(const char *name)
{
	log_name = name;
}

void moor_log(int level, const char *fmt, ...)
{
	static const char *const lv[] = {"error", "warn", "info", "debug"};
	if (level > moor_log_level)
		return;
	char line[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	/* one record a line: control bytes (a newline in a client's text
	 * that a message quotes, an escape sequence) are written as \xNN, so
	 * nobody forges a log line or drives the reader's terminal */
	char esc[sizeof line * 4];
	size_t k = 0;
	for (const unsigned char *c = (const unsigned char *)line; *c; c++) {
		if (*c < 0x20 || *c == 0x7f) {
			static const char hx[] = "0123456789abcdef";
			esc[k++] = '\\';
			esc[k++] = 'x';
			esc[k++] = hx[*c >> 4];
			esc[k++] = hx[*c & 15];
		} else {
			esc[k++] = (char)*c;
		}
	}
	esc[k] = 0;
	fprintf(stderr, "%s: %s: %s\n", log_name, lv[level & 3], esc);
}

void moor_errf(char *buf, const char *fmt, ...)
{
	if (!buf)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, MOOR_ERRLEN, fmt, ap);
	va_end(ap);
}

float moor_f16_to_f32(uint16_t h)
{
	uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1f,
		 m = h & 0x3ff, u;
	if (e == 0) {
		if (m == 0) {
			u = s;
		} else { /* subnormal: normalise */
			e = 127 - 15 + 1;
			while (!(m & 0x400)) {
				m <<= 1;
				e--;
			}
			m &= 0x3ff;
			u = s | (e << 23) | (m << 13);
		}
	} else if (e == 31) {
		u = s | 0x7f800000u | (m << 13);
	} else {
		u = s | ((e + 127 - 15) << 23) | (m << 13);
	}
	float f;
	memcpy(&f, &u, 4);
	return f;
}

uint16_t moor_f32_to_f16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	uint32_t s = (u >> 16) & 0x8000;
	int32_t e = (int32_t)((u >> 23) & 0xff) - 127 + 15;
	uint32_t m = u & 0x7fffff;
	if (((u >> 23) & 0xff) == 0xff)
		return (uint16_t)(s | 0x7c00 | (m ? 0x200 : 0));
	if (e >= 31)
		return (uint16_t)(s | 0x7c00);
	if (e <= 0) {
		if (e < -10)
			return (uint16_t)s;
		m |= 0x800000;
		uint32_t shift = (uint32_t)(14 - e);
		uint32_t half = 1u << (shift - 1);
		uint32_t r = m >> shift, rem = m & ((1u << shift) - 1);
		if (rem > half || (rem == half && (r & 1)))
			r++;
		return (uint16_t)(s | r);
	}
	uint32_t r = (uint32_t)(e << 10) | (m >> 13), rem = m & 0x1fff;
	if (rem > 0x1000 || (rem == 0x1000 && (r & 1)))
		r++;
	return (uint16_t)(s | r);
}

double moor_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void moor_run_dir_default(char *out, size_t n)
{
	const char *x = getenv("XDG_RUNTIME_DIR");
	if (x && x[0])
		snprintf(out, n, "%s/moor", x);
	else
		snprintf(out, n, "/tmp/moor-%u", (unsigned)getuid());
}
