/* backend.c: the backend an engine runs on, by the name an operator gives
 * (eng.h: eng_backend_pick). The registry (kernels/registry.c) knows which
 * backends this build has; this file turns a name into one or a sentence
 * saying why not. */
#include <string.h>

#include "eng.h"
#include "moor.h"

const kern_ops *eng_backend_pick(const char *name, int device, char *why)
{
	if (!name || strcmp(name, "auto") == 0)
		return kern_backend_auto(device, why);
	const kern_ops *o = kern_backend(name);
	if (!o) {
		if (strcmp(name, "cuda") == 0)
			moor_errf(why, "backend cuda: this build has no CUDA "
				       "backend (built with -Dcuda=disabled, "
				       "or nvcc was not found)");
		else
			moor_errf(why, "backend '%s': expected auto, cpu or "
				       "cuda",
				  name);
		return NULL;
	}
	char err[MOOR_ERRLEN] = "";
	if (o->probe && o->probe(device, err) != 0) {
		moor_errf(why, "backend %s: %s", o->name, err);
		return NULL;
	}
	if (strcmp(o->name, "cpu") == 0)
		moor_errf(why, "backend cpu (asked for)");
	else
		moor_errf(why, "backend %s (device %d, asked for)", o->name,
			  device);
	return o;
}
