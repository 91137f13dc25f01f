// What an op file uses, in one include: record() and Grads (autograd/node.h), every op
// (autograd/ops.h), the CPU's thread pool and dtype dispatch (core/parallel.h, core/dtype.h), and the
// kernels every backend implements (core/kernels.h, called as kernel::<name>(kernel_on(x), ...), an
// element-wise one with its operands as strided(t, shape)). So an op added to a file of autograd/ops/
// needs no new #include.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/recompute_cache.h"
#include "core/kernels.h"
#include "core/parallel.h"

namespace ember {

// Mixed precision (core/precision.h): an op that computes in float32 only (softmax, layer norm, the
// loss: torch.autocast's float32 list) takes a bfloat16 input widened by the differentiable `to`, so
// that the input's gradient comes back rounded to bfloat16, its own dtype.
inline Tensor widened_from_bf16(const Tensor& x) { return x.to(Dtype::Float32); }

// Where a kernel of core/kernels.h runs for tensor t, and on which element type.
inline On kernel_on(const Tensor& t) { return On{t.device().is_cuda() ? t.device().index : -1, int(t.dtype())}; }

// t as an operand of an element-wise kernel (core/kernels.h) that walks `shape`, which t broadcasts to:
// its data, dtype and element strides, 0 along the dims it is broadcast over (t's size 1 there, or
// missing in front).
inline Strided strided(const Tensor& t, const Shape& shape) {
  EMBER_CHECK(t.shape().size() <= shape.size(), "{} does not broadcast to {}", shape_str(t.shape()), shape_str(shape));
  Strided s{t.raw_data(), int(t.dtype()), Strides(shape.size(), 0)};
  const size_t lead = shape.size() - t.shape().size();
  for (size_t d = 0; d < t.shape().size(); ++d) s.strides[lead + d] = t.shape()[d] == 1 ? 0 : t.strides()[d];
  return s;
}
inline Strided strided(const Tensor& t) { return strided(t, t.shape()); }

// A kernel's pointer to t's data, or null for an undefined t (an optional operand, or a result not wanted).
inline void* data_or_null(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }

}  // namespace ember
