/* golden.h: reads tests/golden/<name>/golden.bin, the fixtures written by
 * tests/golden/make_golden.py from transformers (format in its README). */
#ifndef MOOR_GOLDEN_H
#define MOOR_GOLDEN_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct golden {
	uint32_t n_prompt, n_decode, vocab;
	int32_t *prompt;  /* [n_prompt] */
	float *prefill;   /* [n_prompt, vocab] */
	int32_t *fed;     /* [n_decode] */
	float *decode;    /* [n_decode, vocab] */
} golden;

static int rd(FILE *f, void *p, size_t n)
{
	return fread(p, 1, n, f) == n ? 0 : -1;
}

static inline int golden_read(const char *path, golden *g)
{
	memset(g, 0, sizeof *g);
	FILE *f = fopen(path, "rb");
	if (!f)
		return -1;
	char magic[8];
	uint32_t ver;
	int rc = rd(f, magic, 8) || memcmp(magic, "MOORGLD1", 8) ||
		 rd(f, &ver, 4) || ver != 1 || rd(f, &g->n_prompt, 4) ||
		 rd(f, &g->n_decode, 4) || rd(f, &g->vocab, 4);
	if (!rc && (g->n_prompt > 100000 || g->n_decode > 100000 ||
		    g->vocab > 1000000))
		rc = 1;
	if (!rc) {
		size_t np = g->n_prompt, nd = g->n_decode, V = g->vocab;
		g->prompt = malloc(np * 4);
		g->prefill = malloc(np * V * 4);
		g->fed = malloc(nd * 4);
		g->decode = malloc(nd * V * 4);
		rc = !g->prompt || !g->prefill || !g->fed || !g->decode ||
		     rd(f, g->prompt, np * 4) || rd(f, g->prefill, np * V * 4) ||
		     rd(f, g->fed, nd * 4) || rd(f, g->decode, nd * V * 4);
	}
	fclose(f);
	return rc ? -1 : 0;
}

static inline void golden_free(golden *g)
{
	free(g->prompt);
	free(g->prefill);
	free(g->fed);
	free(g->decode);
}

#endif
