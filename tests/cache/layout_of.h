/* layout_of.h: the engine's state layout as the caches see it (what
 * engined sends in HELLO), for the in-process tests and benchmarks. The
 * fingerprint is a hash of the model directory's path. */
#ifndef MOOR_TEST_LAYOUT_OF_H
#define MOOR_TEST_LAYOUT_OF_H

#include <stdio.h>
#include <string.h>

#include "cache.h"
#include "eng.h"

static inline void h_layout(const eng_layout *y, const char *dir,
			    cache_layout *l)
{
	memset(l, 0, sizeof *l);
	l->n_sections = (uint32_t)y->n_sections;
	for (int i = 0; i < y->n_sections; i++) {
		snprintf(l->sec[i].name, sizeof l->sec[i].name, "%s",
			 y->sec[i].name);
		l->sec[i].layer = y->sec[i].layer;
		l->sec[i].bytes = y->sec[i].bytes;
	}
	l->n_views = (uint32_t)y->n_views;
	for (int i = 0; i < y->n_views; i++) {
		cache_view *v = &l->view[i];
		snprintf(v->name, sizeof v->name, "%s", y->view[i].name);
		v->layer = y->view[i].layer;
		v->elt = (uint32_t)kern_dtype_size(y->view[i].dtype);
		v->ndim = (uint32_t)y->view[i].ndim;
		for (int d = 0; d < y->view[i].ndim; d++)
			v->dims[d] = y->view[i].dims[d];
		v->token_axis = (uint32_t)y->view[i].token_axis;
	}
	l->window = (uint64_t)y->window;
	l->grid = (uint32_t)y->grid;
	uint64_t h = 0xcbf29ce484222325ull;
	for (const char *p = dir; *p; p++)
		h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
	memcpy(l->fingerprint, &h, sizeof h);
}

#endif
