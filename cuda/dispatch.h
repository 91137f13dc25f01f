// From a dtype known at run time to the C++ type a kernel is instantiated for: each launcher writes
// its launch once, in a generic lambda, instead of one launch per type.
//     dispatch_floating(float64, [&](auto tag) {
//       using T = decltype(tag);
//       kernel<<<blocks, kThreads, 0, stream>>>(static_cast<const T*>(x), n);
//     });
// The names and sets are core/dtype.h's (dispatch_floating, dispatch_real, dispatch_storable), on the
// raw dtypes of core/cuda_ops.h; fn gets a value of the type (T{}), not a TypeTag.
// CUDA-only (included by cuda/*.cu alone); C++17, host code.
#pragma once
#include <cstdint>

#include "core/bfloat16.h"
#include "core/cuda_ops.h"
#include "cuda/check.h"

namespace ember::cuda {

// Calls fn(double{}) where `float64`, else fn(float{}): the entries of core/cuda_ops.h that take
// `bool float64` (float32 or float64 tensors).
template <typename Fn>
void dispatch_floating(bool float64, Fn&& fn) {
  if (float64)
    fn(double{});
  else
    fn(float{});
}

// Calls fn(BFloat16{}) where `dtype` is kBFloat16, else fn(float{}): the mixed-precision entries (bfloat16
// attention and GEMM), whose tensors are float32 or bfloat16 (their callers check which).
template <typename Fn>
void dispatch_bf16_or_float(int dtype, Fn&& fn) {
  if (dtype == kBFloat16)
    fn(BFloat16{});
  else
    fn(float{});
}

// The ScalarType (core/cuda_ops.h) of each element type.
template <typename T> struct DtypeOf;
template <> struct DtypeOf<float> { static constexpr int value = kFloat32; };
template <> struct DtypeOf<double> { static constexpr int value = kFloat64; };
template <> struct DtypeOf<BFloat16> { static constexpr int value = kBFloat16; };
template <> struct DtypeOf<int32_t> { static constexpr int value = kInt32; };
template <> struct DtypeOf<int64_t> { static constexpr int value = kInt64; };
template <> struct DtypeOf<bool> { static constexpr int value = kBool; };

// Calls fn(T{}) for the one T of Types whose ScalarType is `dtype`; raises `what` when none is.
//     dispatch<float, double, BFloat16>(dtype, "dropout: expected a floating tensor", launch);
template <typename... Types, typename Fn>
void dispatch(int dtype, const char* what, Fn&& fn) {
  const bool found = ((dtype == DtypeOf<Types>::value && (fn(Types{}), true)) || ...);
  if (!found) raise_message(what);
}

// Every element type a CUDA tensor may have (the copies, fills and element-wise ops).
template <typename Fn>
void dispatch_storable(int dtype, const char* what, Fn&& fn) {
  dispatch<float, double, BFloat16, int32_t, int64_t, bool>(dtype, what, static_cast<Fn&&>(fn));
}

// float32, float64 and bfloat16 (computed in float: compute_type).
template <typename Fn>
void dispatch_real(int dtype, const char* what, Fn&& fn) {
  dispatch<float, double, BFloat16>(dtype, what, static_cast<Fn&&>(fn));
}

}  // namespace ember::cuda
