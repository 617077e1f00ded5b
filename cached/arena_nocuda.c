/* arena_nocuda.c: arena.h's CUDA calls in a build without CUDA. */
#include "arena.h"

#include "moor.h"

static int no_cuda(char *err)
{
	moor_errf(err, "this build has no CUDA (built with -Dcuda=disabled, "
		       "or nvcc was not found)");
	return MOOR_EUNSUP;
}

int arena_cuda_probe(int device, char *err)
{
	(void)device;
	return no_cuda(err);
}

int arena_cuda_mem(int device, uint64_t *free_b, uint64_t *total_b, char *err)
{
	(void)device;
	*free_b = *total_b = 0;
	return no_cuda(err);
}

int arena_cuda_create(const char *name, uint64_t size, int device,
		      arena **out, char *err)
{
	(void)name;
	(void)size;
	(void)device;
	*out = NULL;
	return no_cuda(err);
}

int arena_cuda_handle(const arena *a, uint8_t handle[64], int *device)
{
	(void)a;
	(void)handle;
	(void)device;
	return MOOR_EUNSUP;
}

int arena_cuda_mover_new(int device, const arena *dev, arena *host,
			 arena_mover **out, char *err)
{
	(void)device;
	(void)dev;
	(void)host;
	*out = NULL;
	return no_cuda(err);
}

int arena_cuda_mover_twin(const arena_mover *m, arena_mover **out, char *err)
{
	(void)m;
	*out = NULL;
	return no_cuda(err);
}

void arena_cuda_mover_free(arena_mover *m)
{
	(void)m;
}
