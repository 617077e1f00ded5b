/* buf.h: moor's one growable byte buffer (`moor_buf`). proto encodes
 * messages into it, the template renderers write prompts into it, the
 * gateway writes SSE frames and the Prometheus text into it.
 *
 * A zeroed moor_buf is empty and valid. Once anything was put (a put of 0
 * bytes included), p is allocated and p[len] is a NUL, so a text user can
 * read p as a C string; a binary user ignores the extra byte. A failure is
 * sticky: err keeps the first one (-ENOMEM, or what a user set, as proto's
 * MOOR_ERANGE for a message over its limit) and every later put is a
 * no-op, so a writer checks once, at the end.
 *
 * Ownership: p is the buffer's (malloc'd) until moor_buf_fini frees it or
 * moor_buf_take hands it to the caller. The fields are public: read p and
 * len, set err; grow only through the calls below. */
#ifndef MOOR_BUF_H
#define MOOR_BUF_H

#include <stddef.h>

typedef struct moor_buf {
	char *p;	 /* [cap] bytes; p[len] == 0 once allocated */
	size_t len, cap; /* bytes written; bytes allocated */
	int err;	 /* 0, or the first failure (sticky) */
} moor_buf;

/* n more bytes at the end for the caller to write (len grows by n), or
 * NULL with err set (b->err already set: NULL, nothing done). */
char *moor_buf_room(moor_buf *b, size_t n);
void moor_buf_put(moor_buf *b, const void *s, size_t n);
void moor_buf_puts(moor_buf *b, const char *s);
void moor_buf_printf(moor_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Empties b (len 0, err 0), keeping its memory. */
void moor_buf_reset(moor_buf *b);
/* Frees p and zeroes b; safe on a zeroed buffer and on NULL. */
void moor_buf_fini(moor_buf *b);
/* Hands p to the caller (free() it) with its length in *len (may be NULL)
 * and zeroes b. NULL when nothing was put or err is set (p is freed). */
char *moor_buf_take(moor_buf *b, size_t *len);

#endif
