// The CUDA backend's entry points in a build without CUDA, generated from their one declaration in
// core/cuda_ops.h and core/kernels.h: each raises "<name>: this build of Ember has no CUDA backend" (a setting gives
// its EMBER_CUDA_DEFAULT answer instead). They are never reached, since no tensor can live on a GPU
// in such a build (Tensor::empty on cuda:N already fails in the allocator); they exist so that the
// ops link the same way in every build, and say why if something does reach them.
#ifndef EMBER_WITH_CUDA
#include "core/error.h"

namespace ember::cuda {
[[noreturn]] void no_cuda_backend(const char* name) { fail("{}: this build of Ember has no CUDA backend", name); }
}  // namespace ember::cuda

// NOTE: this must be the first inclusion of core/cuda_ops.h and core/kernels.h in this file (#pragma once).
#define EMBER_CUDA_ENTRY(type, name, params) \
  type name params { no_cuda_backend(#name); }
#define EMBER_CUDA_DEFAULT(type, name, params, body) type name params body
#define EMBER_KERNEL(type, name, params) \
  namespace cuda {                       \
  type name params { no_cuda_backend(#name); } \
  }
#pragma GCC diagnostic ignored "-Wunused-parameter"  // a stub names its parameters and ignores them
#include "core/cuda_ops.h"
#include "core/kernels.h"
#endif
