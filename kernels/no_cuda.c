/* no_cuda.c: the registry's CUDA entry in a build without CUDA. */
#include "ops.h"

const kern_ops *const kern_cuda_entry = NULL;
