// Without the CUDA backend no tensor can live on a GPU, so these are never reached; they exist
// so that core/ops/unary.cpp links the same way in every build.
#ifndef EMBER_WITH_CUDA
#include "core/cuda_unary.h"
#include "core/error.h"

namespace ember::cuda {

#define EMBER_STUB_CUDA_UNARY(name, Functor)                                                          \
  void unary_forward(const math::Functor&, int, bool, const void*, void*, int64_t) {                  \
    fail(#name ": this build of Ember has no CUDA backend");                                          \
  }                                                                                                   \
  void unary_backward(const math::Functor&, int, bool, const void*, const void*, const void*, void*, \
                      int64_t) {                                                                      \
    fail(#name ": this build of Ember has no CUDA backend");                                          \
  }
EMBER_UNARY_OPS(EMBER_STUB_CUDA_UNARY)
EMBER_STUB_CUDA_UNARY(pow, Pow)
EMBER_STUB_CUDA_UNARY(add_scalar, AddScalar)
EMBER_STUB_CUDA_UNARY(mul_scalar, MulScalar)
#undef EMBER_STUB_CUDA_UNARY

}  // namespace ember::cuda
#endif
