// CPU softmax / log-softmax kernels, forward and fused backward, over any dim, written with the row
// building blocks of core/cpu/rows.h.
//
// A tensor is seen as [outer, n, inner] with the softmax taken over n. inner == 1 (the last dim,
// contiguous) is the fast path: one row per task, every pass over a row a flat vectorisable loop.
// Otherwise blocks of columns are processed together, streaming rows of `inner` contiguous values.
// Each output element is computed by one thread in a fixed order: results never depend on the
// thread count.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace ember::cpu {

// y = softmax(x) (or log_softmax when `log`) over `dim` (non-negative); x any layout, floating.
// Returns a new contiguous tensor of x's shape.
Tensor softmax_forward(const Tensor& x, int64_t dim, bool log, const char* op);
// The gradient of the input from the output gradient `grad` (any layout) and the saved output y
// (contiguous): softmax dx = y * (g - sum(g * y)); log_softmax dx = g - e^y * sum(g).
Tensor softmax_backward(const Tensor& grad, const Tensor& y, int64_t dim, bool log, const char* op);

}  // namespace ember::cpu
