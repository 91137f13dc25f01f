// The CUDA backend's entry points in a build without CUDA, generated from their one declaration in
// core/cuda_ops.h and core/kernels.h: each raises "<name>: this build of Ember has no CUDA backend" (a
// setting gives its EMBER_CUDA_DEFAULT answer instead). They are never reached, since no tensor can live
// on a GPU in such a build (Tensor::empty on cuda:N already fails in the allocator); they exist so that
// the ops link the same way in every build, and say why if something does reach them. In every build,
// this file also checks that core/cuda_ops.h numbers the dtypes as core/dtype.h does.
#ifndef EMBER_WITH_CUDA
#include "core/error.h"

namespace ember::cuda {
[[noreturn]] void no_cuda_backend(const char* name) { fail("{}: this build of Ember has no CUDA backend", name); }
}  // namespace ember::cuda

// NOTE: this must be the first inclusion of core/cuda_ops.h and core/kernels.h in this file (#pragma once).
#define EMBER_CUDA_ENTRY(type, name, params) \
  type name params { no_cuda_backend(#name); }
#define EMBER_CUDA_DEFAULT(type, name, params, body) type name params body
#define EMBER_KERNEL_OVERLOAD(type, name, params) \
  namespace cuda {                                \
  type name params { no_cuda_backend(#name); }    \
  }
#define EMBER_KERNEL_CHOICE(type, name)
#define EMBER_KERNEL(type, name, params) EMBER_KERNEL_OVERLOAD(type, name, params)
#pragma GCC diagnostic ignored "-Wunused-parameter"  // a stub names its parameters and ignores them
#include "core/cuda_ops.h"
#include "core/kernels.h"
#endif

#include "core/cuda_ops.h"  // (in a build without CUDA, already included above)
#include "core/dtype.h"

// The kernels take a Dtype as a number (On::dtype, Strided::dtype), which cuda/ reads as a ScalarType.
static_assert(int(ember::Dtype::Float32) == ember::cuda::kFloat32 && int(ember::Dtype::Float64) == ember::cuda::kFloat64 &&
                  int(ember::Dtype::Int32) == ember::cuda::kInt32 && int(ember::Dtype::Int64) == ember::cuda::kInt64 &&
                  int(ember::Dtype::BFloat16) == ember::cuda::kBFloat16 && int(ember::Dtype::Float16) == ember::cuda::kFloat16 &&
                  int(ember::Dtype::Bool) == ember::cuda::kBool,
              "core/cuda_ops.h numbers the dtypes like core/dtype.h");
