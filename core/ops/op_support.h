// What an op file uses, in one include: record() and Grads (autograd/node.h), every op
// (core/ops.h), the CPU's thread pool and dtype dispatch (core/parallel.h, core/dtype.h), and the
// GPU's entry points with their operand layout (core/gpu.h, core/cuda_ops.h), and the kernels every
// backend implements (core/kernels.h, called as kernel::<name>(kernel_on(x), ...)). So an op added to a
// file of core/ops/ needs no new #include: its CPU loop and its CUDA call have what they need.
// Kernels of one op family (core/cpu/<family>.h) come on top.
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

#include "autograd/node.h"
#include "autograd/recompute_cache.h"
#include "core/gpu.h"
#include "core/kernels.h"
#include "core/ops.h"
#include "core/parallel.h"

namespace ember {

// Mixed precision (core/precision.h): an op that computes in float32 only (softmax, layer norm, the
// loss: torch.autocast's float32 list) takes a bfloat16 input widened by the differentiable `to`, so
// that the input's gradient comes back rounded to bfloat16, its own dtype.
inline Tensor widened_from_bf16(const Tensor& x) { return x.to(Dtype::Float32); }

// Where a kernel of core/kernels.h runs for tensor t, and on which element type.
inline On kernel_on(const Tensor& t) { return On{t.device().is_cuda() ? t.device().index : -1, int(t.dtype())}; }

// A kernel's pointer to t's data, or null for an undefined t (an optional operand, or a result not wanted).
inline void* data_or_null(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }

}  // namespace ember
