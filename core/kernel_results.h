// What a device's kernels hand back to an op, the same on every device: the CPU kernels
// (core/cpu/) and the GPU's (core/gpu.h) return these, so that an op saves one thing for its
// backward whatever the device.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace ember {

// Cross-entropy over [N, C] logits (core/ops/cross_entropy.cpp).
struct CrossEntropyForward {
  Tensor loss;       // 0-d, the logits' dtype: mean over counted rows; 0 if no row counts
  // Per row (the logits' dtype; 0 and 1 for ignored rows): the max m and s = sum(e^(x - m)), so that
  // log_softmax = (x - m) - log(s) and softmax = e^(x - m) / s without rounding m + log(s).
  Tensor row_max;   // [N]
  Tensor sum_exp;   // [N]
  int64_t count = 0; // rows whose target is not ignore_index
};

}  // namespace ember
