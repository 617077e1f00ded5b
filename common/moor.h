/* moor.h: what every part of moor shares: error codes, assertions, logging,
 * bf16/f16 conversion. The `moor_` prefix is common/'s. */
#ifndef MOOR_H
#define MOOR_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Errors: 0 is success; system errors are -errno; project errors are the
 * negative constants below (return MOOR_EFORMAT, not -MOOR_EFORMAT), a
 * reserved negative band below MOOR_EBASE, named by moor_strerror(). */
enum {
	MOOR_EBASE = -30000,
	MOOR_EFORMAT = MOOR_EBASE - 1,   /* a file or message is malformed */
	MOOR_ESHAPE = MOOR_EBASE - 2,    /* a tensor has the wrong shape */
	MOOR_EDTYPE = MOOR_EBASE - 3,    /* a tensor has an unsupported dtype */
	MOOR_EMISSING = MOOR_EBASE - 4,  /* a required tensor or field is absent */
	MOOR_EUNSUP = MOOR_EBASE - 5,    /* an unsupported model or feature */
	MOOR_ERANGE = MOOR_EBASE - 6,    /* an argument out of range */
	MOOR_ETRUNC = MOOR_EBASE - 7,    /* a file is shorter than it claims */
	MOOR_EVERSION = MOOR_EBASE - 8,  /* a peer or file of another version */
	MOOR_ENOSPACE = MOOR_EBASE - 9,  /* an arena or budget is full */
	MOOR_EBACKEND = MOOR_EBASE - 10, /* a compute backend failed */
	MOOR_ELAST = MOOR_EBASE - 11,
};

/* A static string for any code this project returns (project or -errno). */
const char *moor_strerror(int err);

/* Bugs assert; runtime failures return codes. Active in every build. */
void moor_assert_fail(const char *expr, const char *file, int line)
	__attribute__((noreturn));
#define MOOR_ASSERT(x)                                                        \
	do {                                                                  \
		if (!(x))                                                     \
			moor_assert_fail(#x, __FILE__, __LINE__);             \
	} while (0)

/* Logging to stderr with a level and the process name. */
enum { MOOR_LOG_ERROR = 0, MOOR_LOG_WARN, MOOR_LOG_INFO, MOOR_LOG_DEBUG };
extern int moor_log_level;
void moor_log_set_name(const char *name);
void moor_log(int level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
#define moor_err(...) moor_log(MOOR_LOG_ERROR, __VA_ARGS__)
#define moor_warn(...) moor_log(MOOR_LOG_WARN, __VA_ARGS__)
#define moor_info(...) moor_log(MOOR_LOG_INFO, __VA_ARGS__)
#define moor_debug(...) moor_log(MOOR_LOG_DEBUG, __VA_ARGS__)

/* An error message buffer that a failing call fills with what went wrong,
 * naming the file and tensor. Callers own it; size MOOR_ERRLEN. */
#define MOOR_ERRLEN 512
void moor_errf(char *buf, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* bf16 and f16 conversions. bf16 rounds to nearest even, as torch does. */
static inline float moor_bf16_to_f32(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static inline uint16_t moor_f32_to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN stays a quiet NaN */
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

/* Round an fp32 value to the nearest bf16 and back. */
static inline float moor_round_bf16(float f)
{
	return moor_bf16_to_f32(moor_f32_to_bf16(f));
}

float moor_f16_to_f32(uint16_t h);
uint16_t moor_f32_to_f16(float f);

/* Monotonic time in seconds. */
double moor_now(void);

/* The run directory (sockets, lock files) when no --run-dir is given:
 * $XDG_RUNTIME_DIR/moor, else /tmp/moor-$UID. Writes at most n bytes, NUL
 * included. Every daemon and tool uses this one rule. */
void moor_run_dir_default(char *out, size_t n);

#endif
