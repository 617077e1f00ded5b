/* util.h: small helpers every daemon and tool shares, written once: the
 * run directory's lock files, a strict decimal parser for flags, and a hex
 * printer for fingerprints and digests. */
#ifndef MOOR_UTIL_H
#define MOOR_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* Takes RUN/<name>.lock for the life of the process (the kernel lets go of
 * it when the process dies, SIGKILL included): held by another process
 * means another daemon of this kind serves the run dir; taken means any
 * socket file left there is stale. Never probe a daemon by connecting
 * instead: a stray connection can stall an NNG listener's next accept.
 * Returns the lock's descriptor (close-on-exec; keep it open until exit),
 * -EADDRINUSE when another process holds the lock, or -errno. */
int moor_run_lock(const char *run_dir, const char *name);
/* The run dir must be a directory of this process's user that neither
 * group nor others may write: 0, or -ENOTDIR / -EPERM / -errno with err
 * (MOOR_ERRLEN) saying which and the numbers. moor_run_lock checks it
 * first (and logs err). */
int moor_run_dir_check(const char *run_dir, char *err);

/* s as a decimal uint32_t: digits only (no sign, no space, no empty
 * string), at most UINT32_MAX. 0, or -EINVAL leaving *out alone. */
int moor_parse_u32(const char *s, uint32_t *out);

/* The n bytes at p as lowercase hex into out, which holds 2 * n + 1 bytes
 * (NUL-terminated). */
void moor_hex(const void *p, size_t n, char *out);

/* The first 2 * n characters of s, hex digits of either case, as n bytes
 * into out: 0, or -EINVAL at the first character that is not a hex digit
 * (s shorter than 2 * n ends at its NUL, which is not one). */
int moor_unhex(const char *s, size_t n, void *out);

#endif
