/* buf.c: moor_buf (buf.h). Capacity doubles from 256 bytes. */
#include "buf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *moor_buf_room(moor_buf *b, size_t n)
{
	if (b->err)
		return NULL;
	if (n >= (size_t)-1 / 2 - b->len) {
		b->err = -ENOMEM;
		return NULL;
	}
	size_t need = b->len + n + 1; /* the NUL */
	if (need > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < need)
			cap *= 2;
		char *p = realloc(b->p, cap);
		if (!p) {
			b->err = -ENOMEM;
			return NULL;
		}
		b->p = p;
		b->cap = cap;
	}
	char *q = b->p + b->len;
	b->len += n;
	b->p[b->len] = 0;
	return q;
}

void moor_buf_put(moor_buf *b, const void *s, size_t n)
{
	char *q = moor_buf_room(b, n);
	if (q && n)
		memcpy(q, s, n);
}

void moor_buf_puts(moor_buf *b, const char *s)
{
	moor_buf_put(b, s, strlen(s));
}

void moor_buf_printf(moor_buf *b, const char *fmt, ...)
{
	if (b->err)
		return;
	va_list ap;
	va_start(ap, fmt);
	size_t room = b->cap > b->len ? b->cap - b->len : 0;
	int n = vsnprintf(b->p ? b->p + b->len : NULL, room, fmt, ap);
	va_end(ap);
	if (n < 0) {
		b->err = -EINVAL;
		return;
	}
	if ((size_t)n < room) { /* it fitted, NUL included */
		b->len += (size_t)n;
		return;
	}
	size_t at = b->len;
	char *q = moor_buf_room(b, (size_t)n);
	if (!q) { /* the truncated try is past len: cut it off */
		if (b->p)
			b->p[b->len] = 0;
		return;
	}
	va_start(ap, fmt);
	vsnprintf(b->p + at, (size_t)n + 1, fmt, ap);
	va_end(ap);
}

void moor_buf_reset(moor_buf *b)
{
	b->len = 0;
	b->err = 0;
	if (b->p)
		b->p[0] = 0;
}

void moor_buf_fini(moor_buf *b)
{
	if (!b)
		return;
	free(b->p);
	memset(b, 0, sizeof *b);
}

char *moor_buf_take(moor_buf *b, size_t *len)
{
	char *p = b->err ? NULL : b->p;
	if (len)
		*len = p ? b->len : 0;
	if (!p)
		free(b->p);
	memset(b, 0, sizeof *b);
	return p;
}
